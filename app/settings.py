"""A run's settings: what the stages read (metainfer_core.settings.Settings) and what only this
layer and the flows read: where Prefect runs (deploy), how adapt_many maps adapt over models
(task_runner), the MLflow and Prefect stores (tracking), schedules (reprofile.cron), the flows'
inputs (feedback, gc, models, targets) and debug. The flow layer composes Hydra YAML into a plain
dict (app/compose.py); validate_settings turns it into RunSettings and rejects bad values with
one readable paragraph, before any work is done. Nothing here imports Prefect, Hydra or MLflow."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from metainfer_core.errors import MetaInferError
from metainfer_core.settings import ReprofileSettings, Settings, Strict, TrackingSettings


class RunTrackingSettings(TrackingSettings):
    """conf/tracking/: the fingerprint library (the stages') and the MLflow and Prefect stores."""
    mlflow_uri: str
    prefect_home: str
    experiment: str


class RunReprofileSettings(ReprofileSettings):
    cron: str = "0 2 * * *"                             # nightly schedule of `flows/reprofile.py --serve`
    targets: list[str] = Field(default_factory=lambda: ["cpu", "gpu", "npu", "fpga", "asic"])


class FeedbackSettings(Strict):
    latencies_ms: list[float] = Field(default_factory=list)     # measured by a deployment (flows/feedback.py)
    model_path: str | None = None                               # the deployed ONNX; default: the active plan


class GcSettings(Strict):
    keep: int = Field(default=5, ge=1)      # flows/gc.py: run folders kept per (model, target) pair
    dry_run: bool = False                   # only list what would go


class DeploySettings(Strict):
    """conf/deploy/: where Prefect runs (a temporary local server, or a fleet's server)."""
    name: str = "embedded"
    prefect_api_url: str | None = None          # None: a temporary local Prefect server
    work_pool: str = "{target}"                 # a target's work pool ({target}: the target's name)
    remote_verify: bool = False                 # adapt: verify on the target's pool (deployment verify/<target>)
    remote_verify_timeout_s: float = Field(default=1800, gt=0)   # wait for that run at most this long

    @model_validator(mode="after")
    def _remote_needs_server(self) -> "DeploySettings":
        if self.remote_verify and not self.prefect_api_url:
            raise ValueError("deploy.remote_verify=true runs verify as a deployment on the target's work pool, which "
                             "needs a Prefect server: use deploy=fleet (deploy.prefect_api_url) with "
                             "tracking.fingerprint_db on the fleet's shared database")
        return self

    @field_validator("prefect_api_url")
    @classmethod
    def _http(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError(f"{url!r} is not an http(s) URL; give the Prefect server's API, e.g. "
                             "http://127.0.0.1:4200/api")
        return url

    @field_validator("work_pool")
    @classmethod
    def _pool_template(cls, template: str) -> str:
        try:
            name = template.format(target="t")
        except (KeyError, IndexError, ValueError):
            raise ValueError(f"{template!r} may only use the placeholder {{target}}") from None
        if not name.strip():
            raise ValueError("a work pool name cannot be empty")
        return template

    def pool(self, target: str) -> str:
        return self.work_pool.format(target=target)


class TaskRunnerSettings(Strict):
    """flows/adapt_many.py: the Prefect task runner that maps adapt over models."""
    kind: Literal["threads", "process", "dask"] = "threads"
    max_workers: int = Field(default=4, ge=1, le=256)
    dask_address: str | None = None             # an existing Dask scheduler; None: a local cluster


class RunSettings(Settings):
    tracking: RunTrackingSettings
    reprofile: RunReprofileSettings = Field(default_factory=RunReprofileSettings)
    feedback: FeedbackSettings = Field(default_factory=FeedbackSettings)
    gc: GcSettings = Field(default_factory=GcSettings)
    deploy: DeploySettings = Field(default_factory=DeploySettings)
    task_runner: TaskRunnerSettings = Field(default_factory=TaskRunnerSettings)
    models: list[str] = Field(default_factory=list)      # flows/adapt_many.py
    targets: list[str] | None = None                     # flows/deploy.py (None: reprofile.targets)
    debug: bool = False              # true: tracebacks (app/cli.py reads it from the command line)


def validate_settings(raw: dict[str, Any]) -> RunSettings:
    """Validate a plain config dict; every problem is reported in one paragraph."""
    try:
        return RunSettings.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "is not a known setting (check the spelling)"
            # a message that names its own setting (target.spec.<key>=<value>) needs no prefix
            problems.append(msg if not where or msg.startswith(f"{where}.") else f"{where}: {msg}")
        raise MetaInferError(
            "Invalid configuration: " + "; ".join(problems) + ". Fix these overrides or the YAML under conf/ and run again."
        ) from None
