"""Beam search over graph actions, scored by the learned cost model, the liveness planner and
per-node accuracy sensitivity."""
from metainfer_core.search.beam import SearchResult, beam_search
from metainfer_core.search.candidate import Candidate
from metainfer_core.search.evaluate import Evaluator
from metainfer_core.search.score import Weights

__all__ = ["Candidate", "Evaluator", "SearchResult", "Weights", "beam_search"]
