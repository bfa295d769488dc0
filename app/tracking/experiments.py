"""Where a run is recorded: one MLflow experiment per model (its runs on every target in one runs
table), created on first use with its artifacts under paths.artifacts unless a tracking server
stores them."""
from __future__ import annotations

from pathlib import Path

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from app.settings import RunSettings

# the MLflow UI opens an experiment in its model-training view (not the GenAI one) with this tag
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")


def experiment_id(client: MlflowClient, s: RunSettings, name: str) -> str:
    """The experiment's id, created when missing. Embedded tracking keeps artifacts under
    paths.artifacts; a tracking server stores them where it is configured to (its
    --artifacts-destination), so every host of a fleet sees the same files."""
    exp = client.get_experiment_by_name(name)
    if exp:
        return exp.experiment_id
    remote = s.tracking.mlflow_uri.startswith(("http://", "https://"))
    try:
        return client.create_experiment(
            name, artifact_location=None if remote else (Path(s.paths.artifacts) / "mlflow-artifacts").as_uri(),
            tags=dict([EXPERIMENT_KIND]))
    except MlflowException:     # another run (adapt_many, a fleet host) created it meanwhile
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


def experiment_name(s: RunSettings, model_name: str) -> str:
    """One experiment per model: its runs on every target line up in one runs table (tag and
    param `target` tell them apart). Runs stored before this, in `<experiment>/<model>@<target>`,
    stay there untouched and readable; nothing reads runs by experiment but the dead-run sweep
    (which also looks there) and the bench's alignment check (its runs are new): the registry, which
    rollback, feedback and re-profiling use, is keyed by `<model>.<target>` and points at runs by id."""
    return f"{s.tracking.experiment}/{model_name}"


def legacy_experiment_name(s: RunSettings, model_name: str) -> str:
    return f"{s.tracking.experiment}/{model_name}@{s.target.name}"
