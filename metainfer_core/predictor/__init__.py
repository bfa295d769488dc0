"""Performance predictor (CatBoost) trained on fingerprint records."""
from metainfer_core.predictor.cost_model import CostModel, PredictorMeta, load_or_train

__all__ = ["CostModel", "PredictorMeta", "load_or_train"]
