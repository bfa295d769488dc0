"""plan.json's shape, in this one place: the typed record build_plan fills from the stage
outputs and read_plan parses a file back into (plan/record.py writes and reads the file).

The contract's fields are required (a null value is allowed where a run may have none, e.g. a
latency nobody measured); the others came later and may be absent from an old run folder's
plan. A key absent from the file stays absent when the record is written again (to_dict), and
keys come out in the order declared here, which is the order plan.json has always had.
Sub-records whose content belongs to another module (the weights, the budget, a binding, the
execution path's settings) stay plain mappings."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from metainfer_core.errors import MetaInferError

PLAN_SCHEMA = "meta-infer/plan/v1"

# A number keeps the type it was written with: a float field would turn a byte count of 123
# into 123.0 and change plan.json's text (build_plan hands over plain ints and floats only).
Number = int | float | None


class Record(BaseModel):
    # an unknown key is refused: every key a plan holds is declared below
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ModelRecord(Record):
    name: str
    source: str
    sha256: str
    nodes_before: int | None = None
    nodes_after: int | None = None
    symbolic_dims: dict[str, Any] | None = None


class TargetRecord(Record):
    name: str
    measurement: Literal["measured", "modeled"]
    firmware: str
    driver: str
    runtime: str
    memory_limit_bytes: int | None = None
    memory_budget_bytes: int | None = None
    note: str | None = None


class PredictorRecord(Record):
    n_records: int | None = None
    val_mape: Number = None


class StepRecord(Record):
    """One applied action. `n_nodes` stands for `nodes` in a candidate read without its side file."""
    kind: str
    nodes: list[str] | None = None
    scope: str | None = None
    params: dict[str, Any] = {}
    n_nodes: int | None = None


class Predicted(Record):
    latency_ms: Number
    peak_mem_bytes: Number
    accuracy_loss: Number
    score: Number


class Metrics(Record):
    """What verify measured of one plan."""
    latency_ms: Number
    p90_ms: Number = None
    peak_mem_bytes: Number
    accuracy_loss: Number                   # on the held-out samples: what the bound judges
    compile_s: Number
    calibration_loss: Number = None         # on the samples that calibrated the plans
    point_losses: dict[str, Number] | None = None   # at the shape range's other points (random inputs)


class Baseline(Metrics):
    """The default plan: measured in the same run, and what the search predicted of it."""
    predicted_latency_ms: Number = None
    predicted_peak_mem_bytes: Number = None


class CandidateRecord(Record):
    label: str
    actions: list[StepRecord] = []
    predicted_latency_ms: Number = None
    predicted_score: Number = None
    predicted_peak_mem_bytes: Number = None
    predicted_accuracy_loss: Number = None
    measured: Metrics | None = None
    error: str | None = None
    verdict: str | None = None
    execution_path: str | None = None
    binding: dict[str, Any] | None = None


class ProfileRecord(Record):
    measured: int | None = None
    reused: int | None = None
    skipped: list[Any] = []
    left: int | None = None


class SearchRecord(Record):
    evaluated: int | None = None
    levels: int | None = None
    depth: int | None = None
    skipped: int | None = None
    dive_stalled_at: int | None = None
    duplicates: int | None = None
    pruned: dict[str, int] = {}
    illegal: dict[str, str] = {}
    failed: dict[str, str] = {}
    stopped_by_budget: bool = False
    timings: dict[str, Any] = {}            # where the search's own time went, some of it per action
    execution_paths: dict[str, Any] = {}
    anchor: dict[str, Any] | None = None
    memory: dict[str, Any] = {}             # per execution path: its MemoryFit (footprint, scale, runs)


class Plan(Record):
    schema_: Literal[PLAN_SCHEMA] = Field(alias="schema")     # BaseModel has a `schema` of its own
    model: ModelRecord
    target: TargetRecord
    fingerprint_version: str
    predictor: PredictorRecord | None = None
    weights: dict[str, Any]
    accuracy_bound: Number = None
    # how many samples calibrated the plans and how many judged their accuracy loss, and where the
    # judging ones came from (accuracy/holdout.py): "held out of data.inputs", "data.validation",
    # "random inputs of other seeds", or "the calibration samples" when too few to split
    accuracy_samples: dict[str, Any] | None = None
    # the input shapes the plan serves (prepare/served_shapes.py): the range (declared or derived from
    # the tuned shape), the tuned sizes, and per verified point its weight, latencies and accuracy loss
    shapes: dict[str, Any] | None = None
    decision: Literal["adapted", "rolled_back", "skipped", "default"]
    reason: str
    actions: list[StepRecord]
    predicted: Predicted
    measured: Metrics
    baseline: Baseline
    candidates: list[CandidateRecord] = []
    accuracy_repairs: list[Any] = []
    # the plans decide would adopt, each timed alone with the default (decide/confirm.py), in turn
    confirmations: list[dict[str, Any]] = []
    default_alone: dict[str, Any] | None = None
    warnings: list[str] = []
    profile: ProfileRecord | None = None
    search: SearchRecord | None = None
    timings: dict[str, Number]
    budget: dict[str, Any] | None = None
    artifact: str
    mlflow_run_id: str | None
    calibration: dict[str, Any] | None = None
    execution_path: dict[str, Any] | None = None
    # how the deployment serves the plan (decide/serve.py): cores, requests at once, the setting
    # chosen under that load, and every plan x setting measured there
    serving: dict[str, Any] | None = None
    verify_remote: dict[str, Any] | None = None        # only when another host measured the plans
    registry: dict[str, Any] | None = None             # added once the registry has the run (app/tracking/registry.py)
    node_lists: str | None = None                      # the side file's name, in a plan read without it

    def to_dict(self) -> dict[str, Any]:
        """plan.json's content: the keys this record was given, in the declared order."""
        return self.model_dump(exclude_unset=True, by_alias=True)

    @classmethod
    def of(cls, data: dict[str, Any], source: str = "plan") -> "Plan":
        """The record of plan.json's content, or a one-paragraph MetaInferError naming `source`."""
        if not isinstance(data, dict):
            raise MetaInferError(f"{source} is not a meta-infer plan: it holds a JSON {type(data).__name__}, not an "
                                 "object.")
        if data.get("schema") != PLAN_SCHEMA:
            found = f"schema {data['schema']!r}" if "schema" in data else "no schema"
            raise MetaInferError(f"{source} has {found}, which this version does not read (it reads {PLAN_SCHEMA!r}): "
                                 "it was written by another version of meta-infer, or is not a plan; run flows/adapt.py "
                                 "again for a plan this version can use.")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'plan'}: {e['msg']}" for e in exc.errors()[:5])
            more = f" (and {exc.error_count() - 5} more)" if exc.error_count() > 5 else ""
            raise MetaInferError(f"{source} is not a valid {PLAN_SCHEMA} plan: {problems}{more}. It may have been "
                                 "edited by hand or cut short; run flows/adapt.py again for a complete one.") from None
