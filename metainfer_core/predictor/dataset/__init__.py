"""Building the training set: candidate plans of the zoo models, their kernels measured through the profile stage and their whole-model runs."""
from metainfer_core.predictor.dataset.training_set import BuildReport, build, record_keys, zoo_entries

__all__ = ["BuildReport", "build", "record_keys", "zoo_entries"]
