"""The adapt pipeline's stages as plain functions (the Prefect tasks wrap these one-to-one):
prepare (load + normalize + feature map + validation data) -> profile -> train -> search ->
verify -> decide (rollback). No orchestration or tracking here."""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx

from metainfer_core.accuracy import degenerate_outputs, run_cpu
from metainfer_core.actions import ACTIONS, ActionContext, Step
from metainfer_core.backends import Backend, create_backend
from metainfer_core.decide import Decision, decide
from metainfer_core.errors import MetaInferError
from metainfer_core.features import model_feature_map
from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.fingerprint.profiler import ProfileReport, profile
from metainfer_core.normalize import NormalizeResult, load_model, normalize
from metainfer_core.predictor import CostModel, load_or_train
from metainfer_core.search import Candidate, Evaluator, SearchResult, Weights, beam_search
from metainfer_core.settings import Settings
from metainfer_core.tensors import input_feeds_spec, random_feeds
from metainfer_core.verify import Verified, verify
from metainfer_core import zoo

Progress = Callable[[str], None]


@dataclass
class Prepared:
    name: str
    source: str
    sha256: str
    normalized: NormalizeResult
    feature_map: dict
    feeds: list[dict[str, np.ndarray]]
    reference: list[list[np.ndarray]]
    degenerate: list[str]          # outputs whose reference is near-constant on these inputs
    seconds: float = 0.0

    @property
    def model(self) -> onnx.ModelProto:
        return self.normalized.model


def make_backend(s: Settings) -> Backend:
    return create_backend(s.target.backend, s.target.name, s.target.measurement, s.target.spec, seed=s.seed)


def _load(s: Settings) -> tuple[onnx.ModelProto, str]:
    if s.model.source == "zoo":
        model = zoo.build(s.model.name, seed=s.seed)
        return model, f"zoo:{s.model.name}"
    return load_model(s.model.path), str(Path(s.model.path).resolve())


def _validation_feeds(s: Settings, model: onnx.ModelProto) -> list[dict[str, np.ndarray]]:
    spec = input_feeds_spec(model)
    if s.data.inputs is None:
        return [random_feeds(model, seed=s.seed + i) for i in range(s.verify.samples)]
    data = np.load(s.data.inputs)
    missing = sorted(set(spec) - set(data.files))
    if missing:
        raise MetaInferError(f"data.inputs={s.data.inputs} has no array for model input(s) {missing} "
                             f"(it has {sorted(data.files)}). Save one array per input, keyed by the input's name.")
    n = min(len(data[k]) for k in spec)
    feeds = []
    for i in range(n):
        feed = {}
        for k, info in spec.items():
            arr = np.asarray(data[k][i]).astype(info.dtype)
            if tuple(arr.shape) != info.shape:
                raise MetaInferError(f"data.inputs: sample {i} of input {k!r} has shape {list(arr.shape)}, the model "
                                     f"(after binding) expects {list(info.shape)}. Bind matching sizes with "
                                     f"model.input_shapes or fix the .npz.")
            feed[k] = arr
        feeds.append(feed)
    return feeds


def prepare(s: Settings, target_static_shapes: bool, progress: Progress = print) -> Prepared:
    t0 = time.perf_counter()
    original, source = _load(s)
    sha = hashlib.sha256(original.SerializeToString()).hexdigest()
    progress(f"normalize: {len(original.graph.node)} nodes from {source}")
    result = normalize(original, input_shapes=s.model.input_shapes or None, seed=s.seed)
    unbound = {k: v for k, v in result.symbolic_dims.items() if any(isinstance(d, str) for d in v)}
    if unbound and target_static_shapes:
        name, dims = next(iter(unbound.items()))
        example = [d if isinstance(d, int) else 1 for d in dims]
        raise MetaInferError(f"Target {s.target.name} needs static shapes, but input {name!r} has symbolic dims {dims}. "
                             f"Bind them for this run, e.g. model.input_shapes={{{name}:{example}}}.")
    progress(f"normalize: {result.nodes_before} -> {result.nodes_after} nodes, max output error "
             f"{max(result.max_abs_err.values(), default=0.0):.2e}")
    feeds = _validation_feeds(s, result.model)
    reference = run_cpu(result.model, feeds)
    names = [o.name for o in result.model.graph.output]
    degenerate = degenerate_outputs(reference, names)
    if degenerate:
        progress(f"WARNING: reference outputs {degenerate} are near-constant on the validation inputs, so accuracy "
                 "figures for them mean little; give real inputs with data.inputs=<file.npz>")
    return Prepared(s.model.name, source, sha, result, model_feature_map(result.model), feeds, reference, degenerate,
                    time.perf_counter() - t0)


def _space(s: Settings) -> dict[str, dict]:
    return {name: dict(domain) for name, domain in s.action_space.actions.items()}


def profiling_variants(s: Settings, prepared: Prepared, backend: Backend) -> list[onnx.ModelProto]:
    """The graph plus one variant per (action, parameter choice) applied everywhere, so the
    library holds the kernels the search will ask the predictor about."""
    ctx = ActionContext(target=backend.info, calibration_feeds=prepared.feeds)
    variants = [prepared.model]
    for name, domain in _space(s).items():
        action = ACTIONS[name]
        for params in action.choices(domain):
            for site in action.sites(prepared.model, params, ctx.target):
                if action.legal(prepared.model, site, params, ctx.target) is None:
                    try:
                        variants.append(action.apply(prepared.model, site, params, ctx))
                    except Exception:  # noqa: BLE001 - the search reports rewrites that fail
                        pass
    return variants


def profile_stage(s: Settings, prepared: Prepared, backend: Backend, progress: Progress = print) -> ProfileReport:
    library = FingerprintLibrary(s.tracking.fingerprint_db)
    variants = profiling_variants(s, prepared, backend)
    def tick(done: int, total: int) -> None:
        if done == total or done % 10 == 0:
            progress(f"profile: {done}/{total} kernels")

    report = profile(backend, library, variants, s.profile.batch_gradient, s.profile.reps, s.profile.warmup, tick)
    progress(f"profile: {report.measured} measured, {report.reused} reused from library "
             f"{report.fingerprint_version} in {report.seconds:.1f}s")
    return report


def train_stage(s: Settings, fingerprint_version: str, progress: Progress = print) -> tuple[CostModel, bool]:
    library = FingerprintLibrary(s.tracking.fingerprint_db)
    records = library.records(fingerprint_version)
    folder = s.artifacts / "predictors" / fingerprint_version
    cm, trained = load_or_train(records, fingerprint_version, folder, seed=s.seed)
    progress(f"train: {'trained' if trained else 'reused'} CatBoost predictor on {cm.meta.n_records} records "
             f"(held-out kernel MAPE {cm.meta.val_mape:.1%})")
    return cm, trained


@dataclass
class SearchOutcome:
    result: SearchResult | None
    skipped_reason: str | None = None
    default: Candidate | None = None
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def search_stage(s: Settings, prepared: Prepared, backend: Backend, cost_model: CostModel,
                 progress: Progress = print) -> SearchOutcome:
    t0 = time.perf_counter()
    info = backend.info
    weights = Weights(s.weights.latency, s.weights.memory, s.weights.accuracy, s.weights.change_penalty)
    lossy = {n for n, a in ACTIONS.items() if a.lossy}
    evaluator = Evaluator(cost_model, info, weights, s.accuracy.max_loss, prepared.feeds, prepared.reference, lossy)
    default = Candidate(prepared.model)
    evaluator.set_baseline(default)
    if default.latency_ms < s.search.skip_below_ms:
        reason = (f"default plan predicted at {default.latency_ms:.3g} ms, below search.skip_below_ms="
                  f"{s.search.skip_below_ms}: the search would cost more than it can save")
        progress(f"search: skipped ({reason})")
        return SearchOutcome(None, reason, default, time.perf_counter() - t0)
    ctx = ActionContext(target=info, calibration_feeds=prepared.feeds)

    def tick(level: int, frontier: int, best: float) -> None:
        progress(f"search: depth {level}/{s.search.depth}, {frontier} new candidates, best score {best:.4f} "
                 f"(default {default.score:.4f})")

    result = beam_search(prepared.model, _space(s), evaluator, ctx, s.search.beam_width, s.search.depth,
                         s.search.top_k, s.search.time_budget_s, tick)
    progress(f"search: {result.evaluated} candidates scored, {len(result.top)} better than default, "
             f"{result.search_s:.1f}s")
    return SearchOutcome(result, None, result.default, time.perf_counter() - t0)


@dataclass
class VerifyOutcome:
    baseline: Verified
    candidates: list[Verified]
    seconds: float


def verify_stage(s: Settings, prepared: Prepared, backend: Backend, outcome: SearchOutcome,
                 progress: Progress = print) -> VerifyOutcome:
    t0 = time.perf_counter()
    top = outcome.result.top if outcome.result else []
    models = [("default", prepared.model)] + [(f"candidate{i + 1}", c.model) for i, c in enumerate(top)]
    progress(f"verify: {len(models)} plans on {backend.info.name} ({backend.info.measurement}), "
             f"{s.verify.runs} interleaved runs each")
    results = verify(backend, models, prepared.feeds, prepared.reference, s.verify.runs, s.verify.warmup)
    return VerifyOutcome(results[0], results[1:], time.perf_counter() - t0)


def decide_stage(s: Settings, backend: Backend, outcome: SearchOutcome, verified: VerifyOutcome) -> tuple[Decision, Candidate | None]:
    if outcome.skipped_reason:
        return Decision("skipped", outcome.skipped_reason, None), None
    top = outcome.result.top if outcome.result else []
    if not top:
        return Decision("default", "the search found no plan predicted to beat the default", None), None
    d = decide(verified.baseline, verified.candidates, s.accuracy.max_loss, backend.info.memory_limit_bytes)
    return d, (top[d.chosen] if d.chosen is not None else None)


def steps_as_dicts(steps: tuple[Step, ...]) -> list[dict]:
    return [st.as_dict() for st in steps]
