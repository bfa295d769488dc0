"""The search: a beam over action sequences, scored by the learned cost model, the liveness
planner and per-node accuracy sensitivity, within a time budget on a clock passed in.

Words, one per idea (docs/search.md tells the idea in prose):
- plan: the default graph plus a sequence of steps; a candidate is a plan being scored.
- step: one action applied at one site with its parameters. expansion: a state's child by one
  (action, parameters, site). state: a plan the beam keeps growing.
- kind (of a plan): its lossy steps' labels (Action.kind_label) and its execution path.
- graph form: what a runtime sees of a graph's numbers (path_costs.graph_class); graph family:
  a form refined by which op types it quantizes or computes in 16 bits (PathCosts.family):
  graphs of one family share a measured path ratio and anchor.
- measurement: what scoring an expansion measures anew (a precision's sensitivity, an
  execution path's ratio, an outside quantizer's calibration); an expansion measuring nothing
  new is warm.
- anchor: a graph's measured latency on the default path over its predicted one.
  path ratio: a graph family's latency on an execution path over the default path's.
- dive: the greedy descent to full depth first; coasting: the dive going on with warm steps
  once no step was predicted to gain. widening: the beam from the root over the rest.
- budget: the search's time and the prices of expansions (budget.py).
- finalists: the top and the explored plans handed to verify; twins: plans of one kind scored
  within the predictor's resolution of each other (finalists.py).

Modules: beam (the loop), expander (making and filing children), budget, order (which expansion
next), finalists, evaluate (a candidate's score) with latency and accuracy_estimate,
path_costs (measured path ratios), anchor, score, candidate, clock, search_log, stage."""
from metainfer_core.search.beam import SearchResult, beam_search
from metainfer_core.search.candidate import Candidate
from metainfer_core.search.evaluate import Evaluator
from metainfer_core.search.score import Weights

__all__ = ["Candidate", "Evaluator", "SearchResult", "Weights", "beam_search"]
