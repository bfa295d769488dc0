"""Performance predictor: a CatBoost kernel model (latency and peak memory per kernel, from
the fingerprint library) plus a model-level correction learned from whole-model runs;
offline training on the zoo, leave-one-model-out validation, online fine-tuning, and the
calibration check that marks a predictor stale. By role: `model` (the cost model: load, save,
update by fine-tuning, predict), `features` (what it reads), `dataset` (building the training
set through the backend), `lifecycle` (training stage, revisions, validation, calibration)."""
from metainfer_core.predictor.model.cost_model import CostModel, PredictorMeta, load_or_train
from metainfer_core.predictor.model.kernel_model import kernel_params
from metainfer_core.predictor.lifecycle.store import PredictorStore
from metainfer_core.predictor.features.target_join import TargetSpec

__all__ = ["CostModel", "PredictorMeta", "PredictorStore", "TargetSpec", "kernel_params", "load_or_train"]
