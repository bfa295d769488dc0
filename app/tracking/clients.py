"""The MLflow clients of a run's settings, and whether the tracking store keeps the models' files:
with embedded tracking they stay in the run folder (the registry points there); a tracking server
gets them too, for the fleet's hosts."""
from __future__ import annotations

from mlflow.tracking import MlflowClient

from app.settings import RunSettings


def runs_client(s: RunSettings) -> MlflowClient:
    return MlflowClient(tracking_uri=s.tracking.mlflow_uri)


def registry_client(s: RunSettings) -> MlflowClient:
    return MlflowClient(tracking_uri=s.tracking.mlflow_uri, registry_uri=s.tracking.mlflow_uri)


def logs_models(s: RunSettings) -> bool:
    return s.tracking.mlflow_uri.startswith(("http://", "https://"))
