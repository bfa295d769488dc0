"""Typed settings of what the stages read (model, target, weights, accuracy, search, profile,
verify, data, budget, the fingerprint library, the predictor, re-profiling), each value checked
before any work is done. The orchestration layer extends them with its own (app/settings.py)
and validates the composed configuration there. Tests and other callers can build settings by
hand."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from metainfer_core.budget import Budget
from metainfer_core.errors import MetaInferError
from metainfer_core.model_name import default_model_name


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ModelSettings(Strict):
    name: str | None = None
    source: Literal["zoo", "file"]
    path: str | None = None
    input_shapes: dict[str, list[int]] = Field(default_factory=dict)     # the shape a plan is tuned at
    shape_range: dict[str, list[Any]] = Field(default_factory=dict)     # every shape it must serve

    @model_validator(mode="after")
    def _file_needs_path(self) -> "ModelSettings":
        if self.source == "file":
            if not self.path:
                raise ValueError("model=file needs a path: add model.path=<file.onnx>")
            if not Path(self.path).is_file():
                what = "is a directory" if Path(self.path).is_dir() else "does not exist"
                raise ValueError(f"model.path={self.path} {what}; give the path of an .onnx file")
            self.name = self.name or default_model_name(self.path)
        else:
            from metainfer_core.zoo import names  # late: builders import onnx

            if self.name not in names():
                raise ValueError(f"unknown zoo model {self.name!r}; built-in models are {names()}")
        for name, dims in self.input_shapes.items():
            if any(d <= 0 for d in dims):
                raise ValueError(f"model.input_shapes.{name}={dims}: every dim must be a positive integer")
        self._range_syntax()
        return self

    def _range_syntax(self) -> None:
        """model.shape_range's form and its rank against model.input_shapes; the checks against
        the model's inputs wait until it is loaded (normalize.shape_range.check_against_model)."""
        from metainfer_core.normalize.shape_range import parse_shape_range  # late: imports onnx

        ranges = parse_shape_range(self.shape_range)
        for name, dims in ranges.items():
            given = self.input_shapes.get(name)
            if given is not None and len(given) != len(dims):
                raise ValueError(f"model.input_shapes.{name}={given} has rank {len(given)}, but model.shape_range."
                                 f"{name} has rank {len(dims)}; give both the model's rank for that input")


BUILT_IN_BACKENDS = "metainfer_core.backends."     # `_target_` classes that need no trust_config_code


class TargetSettings(Strict):
    name: str
    backend: str = Field(alias="_target_")
    measurement: Literal["measured", "modeled"]
    spec: dict[str, Any]

    @model_validator(mode="after")
    def _spec_fits_its_backend(self) -> "TargetSettings":
        from metainfer_core.backends.spec_schema import check_spec

        try:
            check_spec(self.backend, self.spec)
        except ValidationError as exc:
            problems = []
            for err in exc.errors():
                where = ".".join(str(p) for p in err["loc"] if p != "[key]")
                value = "(missing)" if err["type"] == "missing" else repr(err["input"])
                msg = "is not a known spec key (check the spelling)" if err["type"] == "extra_forbidden" else \
                    err["msg"].removeprefix("Value error, ")
                problems.append(f"target.spec.{where}={value}: {msg}")
            raise ValueError("; ".join(problems) + f" (in conf/target/{self.name}.yaml or your overrides)") from None
        return self


class WeightSettings(Strict):
    name: str
    latency: float = Field(ge=0)
    memory: float = Field(ge=0)
    accuracy: float = Field(ge=0)
    change_penalty: float = Field(ge=0)
    memory_floor: float = Field(0.0, ge=0, le=1)
    throughput: float = Field(0.0, ge=0)     # weighs requests per second where serving.concurrency > 1

    @model_validator(mode="after")
    def _not_all_zero(self) -> "WeightSettings":
        if self.latency == self.memory == self.accuracy == 0:
            raise ValueError("weights.latency, weights.memory and weights.accuracy are all 0: nothing to optimise")
        return self


class AccuracySettings(Strict):
    max_loss: float = Field(ge=0, le=1, allow_inf_nan=False)
    metric: str = "cosine"

    @field_validator("metric")
    @classmethod
    def _metric_form(cls, metric: str) -> str:
        from metainfer_core.accuracy.metric import METRICS

        if metric not in METRICS and ":" not in metric:
            raise ValueError(f"{metric!r} is neither one of {list(METRICS)} nor a 'package.module:function'")
        return metric      # user code is imported only under trust_config_code (Settings._config_code)


class SearchSettings(Strict):
    name: str
    beam_width: int = Field(ge=1, le=64)
    depth: int = Field(ge=1, le=32)
    top_k: int = Field(ge=1, le=16)
    time_budget_s: float = Field(gt=0)
    skip_below_ms: float = Field(ge=0)
    expected_runs: int = Field(default=1_000_000, ge=1)   # inferences a plan serves: amortises the search
    explore: int = Field(default=5, ge=0, le=16)         # extra verified plans: best of each untried precision/path


class ActionSpaceSettings(Strict):
    name: str
    actions: dict[str, dict[str, Any]]

    @field_validator("actions")
    @classmethod
    def _known_actions(cls, actions: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        from metainfer_core.actions import ACTIONS  # late: actions import onnx tooling

        unknown = sorted(set(actions) - set(ACTIONS))
        if unknown:
            raise ValueError(f"unknown action(s) {unknown}; known actions are {sorted(ACTIONS)}")
        for name, domain in actions.items():
            ACTIONS[name].choices(domain or {})   # raises ValueError naming a bad parameter or value
        return actions

    def domains(self) -> dict[str, dict[str, Any]]:
        """{action: its parameter domain}, a copy the enumerator (actions.expand) may read."""
        return {name: dict(domain) for name, domain in self.actions.items()}


class TrackingSettings(Strict):
    """conf/tracking/: the stores; the stages read only the fingerprint library's."""
    name: str
    fingerprint_db: str


class ProfileSettings(Strict):
    reps: int = Field(ge=3)
    warmup: int = Field(ge=0)
    batch_gradient: list[int] = Field(min_length=1)


class BudgetSettings(Strict):
    total_s: float = Field(default=160.0, gt=0)
    shares: dict[str, float] = Field(default_factory=lambda: {"normalize": 0.05, "profile": 0.3, "train": 0.05,
                                                              "search": 0.3, "verify": 0.25, "rollback": 0.05})

    @field_validator("shares")
    @classmethod
    def _known_stages(cls, shares: dict[str, float]) -> dict[str, float]:
        if any(v < 0 for v in shares.values()) or sum(shares.values()) <= 0:
            raise ValueError(f"shares must be >= 0 and not all 0, got {shares}")
        Budget.of(1.0, shares)      # names an unknown stage
        return shares

    def start(self, started: float | None = None) -> Budget:
        """started: when the clock began (time.monotonic()), if before now."""
        return Budget.of(self.total_s, self.shares, started)


class VerifySettings(Strict):
    runs: int = Field(ge=3)
    max_runs: int = Field(default=100, ge=3)     # more rounds than `runs` where half the verify share leaves room
    warmup: int = Field(ge=0)
    samples: int = Field(ge=1)
    repair_budget: int = Field(default=8, ge=0)   # accuracy-guard re-evaluations per candidate


class DataSettings(Strict):
    inputs: str | None = None
    validation: str | None = None   # .npz like inputs: the samples that judge accuracy (default: every 3rd of inputs)
    labels_key: str = "labels"      # array in the .npz holding one label per sample, if any

    @field_validator("inputs", "validation")
    @classmethod
    def _exists(cls, path: str | None, info) -> str | None:
        if path is not None and not Path(path).is_file():
            raise ValueError(f"data.{info.field_name}={path} does not exist; give an .npz with one array per model "
                             "input")
        if path is not None:    # before a run starts: its file type, dtypes, values and sample count
            from metainfer_core.normalize.inputs import samples_problem

            problem = samples_problem(path)
            if problem:
                raise MetaInferError(problem)
        return path


class ReprofileSettings(Strict):
    threshold: float = Field(default=0.1, gt=0, lt=10)   # relative change of a typical kernel that counts as drift
    # fine-tuning the previous version's predictor on the re-measured kernels (CatBoost init_model)
    fine_tune_iterations: int = Field(default=100, ge=1, le=5000)
    fine_tune_learning_rate: float = Field(default=0.1, gt=0, le=1)


class PredictorSettings(Strict):
    name: str = "default"
    mode: Literal["train", "fine_tune"] = "train"   # what flows/train.py does
    zoo: list[str] | None = None                    # zoo models flows/train.py learns from (None: all)
    plan_depth: int = Field(default=2, ge=0, le=4)
    max_plans: int = Field(default=40, ge=1, le=500)
    runs: int = Field(default=30, ge=3)
    warmup: int = Field(default=3, ge=0)
    iterations: int = Field(default=600, ge=10, le=20000)
    learning_rate: float = Field(default=0.1, gt=0, le=1)
    depth: int = Field(default=6, ge=1, le=12)
    ridge: float = Field(default=1e-3, ge=0)
    lomo: bool = True                                # leave-one-model-out validation when training on the zoo
    fine_tune_iterations: int = Field(default=30, ge=1, le=5000)
    fine_tune_learning_rate: float = Field(default=0.05, gt=0, le=1)
    fine_tune_weight: float = Field(default=1.0, gt=0)
    fine_tune_tolerance: float = Field(default=0.1, ge=0)           # relative rise of held-out MAPE allowed
    drift_threshold: float = Field(default=0.25, gt=0)
    drift_window: int = Field(default=20, ge=1)
    frozen: bool = False            # use the current revision as it is: no retraining, no recalibration


class ServingSettings(Strict):
    """conf/serving/: how the deployment serves the model (metainfer_core/serving/)."""
    name: str = "latency"
    threads: int = Field(default=1, ge=0)            # cores the deployment gives the model (0: all usable ones)
    concurrency: int = Field(default=1, ge=1)        # requests in flight at once
    percentile: float = Field(default=99.0, gt=0, lt=100)   # the latency percentile the bound holds...
    bound_ms: float | None = Field(default=None, gt=0)      # ...at most this; None: ServingSettings.bound
    bound_x: float = Field(default=3.0, gt=1)
    duration_s: float = Field(default=2.0, gt=0)     # each plan x serving setting is served this long
    predicted_best: int = Field(default=2, ge=1)     # of a plan's settings the predictor scores, this many are served

    @property
    def cores(self) -> int:
        from metainfer_core.serving.options import usable_cores

        return self.threads or usable_cores()

    @property
    def request_threads(self) -> int:
        """The intra-op threads one request gets while `concurrency` share the cores: what the
        search and latency verify measure at."""
        return max(1, self.cores // self.concurrency)

    @property
    def under_load(self) -> bool:
        """Several requests at once: plans are also served under that load before one is kept."""
        return self.concurrency > 1

    def bound(self, default_alone_ms: float) -> float:
        """The latency percentile's bound (ms): bound_ms, else bound_x times the default's latency
        one request at a time, times the requests each core serves in turn where more are in flight
        than cores (a request then waits for others however it is served)."""
        return self.bound_ms or self.bound_x * default_alone_ms * max(1.0, self.concurrency / self.cores)


class PathSettings(Strict):
    artifacts: str


class Settings(Strict):
    model: ModelSettings
    target: TargetSettings
    weights: WeightSettings
    accuracy: AccuracySettings
    search: SearchSettings
    action_space: ActionSpaceSettings
    tracking: TrackingSettings
    profile: ProfileSettings
    verify: VerifySettings
    data: DataSettings
    budget: BudgetSettings = Field(default_factory=BudgetSettings)
    paths: PathSettings
    reprofile: ReprofileSettings = Field(default_factory=ReprofileSettings)
    predictor: PredictorSettings = Field(default_factory=PredictorSettings)
    serving: ServingSettings = Field(default_factory=ServingSettings)
    seed: int = 0
    trust_config_code: bool = False     # may the configuration name code to import (metric, backend)?

    @model_validator(mode="after")
    def _config_code(self) -> "Settings":
        """Code the configuration names outside meta-infer (a `package.module:function` metric, a
        `_target_` backend class elsewhere) runs when imported: only with trust_config_code=true."""
        from metainfer_core.accuracy.metric import METRICS, make_loss

        named = []
        if self.accuracy.metric not in METRICS:
            named.append(f"accuracy.metric={self.accuracy.metric}")
        if not self.target.backend.startswith(BUILT_IN_BACKENDS):
            named.append(f"target._target_={self.target.backend}")
        if named and not self.trust_config_code:
            raise ValueError(
                f"{' and '.join(named)} names code outside meta-infer, and importing a module runs it. It is "
                "imported only when you trust the configuration: add trust_config_code=true (off by default; it "
                "travels with the overrides to fleet workers, which refuse such code unless it is set)")
        if self.accuracy.metric not in METRICS:
            try:
                make_loss(self.accuracy.metric)
            except (ImportError, AttributeError, ValueError) as exc:
                raise ValueError(f"accuracy.metric={self.accuracy.metric!r} is not an importable "
                                 f"'package.module:function' ({exc})") from None
        return self

    @model_validator(mode="after")
    def _serving_threads(self) -> "Settings":
        """A host target's intra-op threads are the serving group's: one place says how many cores
        a request gets (a spec of its own would measure plans at a count no deployment uses)."""
        from metainfer_core.backends.spec_schema import SCHEMAS, HostSpec

        if SCHEMAS.get(self.target.backend) is not HostSpec:
            return self
        if "intra_op_threads" in self.target.spec:
            raise ValueError(f"target.spec.intra_op_threads={self.target.spec['intra_op_threads']}: the threads a "
                             "request gets are the serving group's: set serving.threads (cores the deployment gives "
                             "the model, 0: all) and serving.concurrency (requests at once) instead (conf/serving/)")
        self.target.spec["intra_op_threads"] = self.serving.request_threads
        return self

    @property
    def artifacts(self) -> Path:
        return Path(self.paths.artifacts)

