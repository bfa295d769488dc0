"""Performance predictor: a CatBoost kernel model (latency and peak memory per kernel, from
the fingerprint library) plus a model-level correction learned from whole-model runs;
offline training on the zoo, leave-one-model-out validation, online fine-tuning, and the
calibration check that marks a predictor stale."""
from metainfer_core.predictor.cost_model import CostModel, PredictorMeta, load_or_train
from metainfer_core.predictor.kernel_model import kernel_params
from metainfer_core.predictor.store import PredictorStore
from metainfer_core.predictor.target_join import TargetSpec

__all__ = ["CostModel", "PredictorMeta", "PredictorStore", "TargetSpec", "kernel_params", "load_or_train"]
