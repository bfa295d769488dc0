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

from metainfer_core.accuracy import LossFn, degenerate_outputs, make_loss, plan_loss, run_cpu
from metainfer_core.accuracy_guard import repair
from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.backends import Backend, create_backend
from metainfer_core.backends.paths import ExecutionPath, missing_paths
from metainfer_core.budget import eta
from metainfer_core.decide import Decision, Objective, decide
from metainfer_core.errors import MetaInferError
from metainfer_core.features import model_feature_map
from metainfer_core.feedback import calibration_ratio, record_runtime, runtime_run
from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.kernels import group_kernels
from metainfer_core.memory import DEFAULT_STRATEGY, model_strategy, peak_reason, plan_memory
from metainfer_core.fingerprint.profiled_sets import mark_profiled, profiled_kernels, set_key
from metainfer_core.fingerprint.profiler import ProfileReport, profile
from metainfer_core.normalize import NormalizeResult, load_model, normalize, unbound_inputs
from metainfer_core.predictor import CostModel, load_or_train
from metainfer_core.search import Candidate, Evaluator, SearchResult, Weights, beam_search
from metainfer_core.search.path_costs import PathCosts
from metainfer_core.settings import Settings
from metainfer_core.tensors import input_feeds_spec, random_feeds, tensor_infos
from metainfer_core.timing import SETTLE
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
    loss_fn: LossFn = plan_loss     # accuracy.metric, bound to the validation labels if any
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


def _validation_feeds(s: Settings, model: onnx.ModelProto, samples: dict[str, np.ndarray] | None = None
                      ) -> tuple[list[dict[str, np.ndarray]], np.ndarray | None]:
    """Validation (and calibration) inputs, plus labels when the .npz has them: data.inputs'
    samples (`samples`: its arrays, already loaded) checked against the model's inputs, else
    seeded random inputs (integers within what the graph allows)."""
    from metainfer_core.normalize.inputs import load_samples, sample_feeds

    if s.data.inputs is None:
        return [random_feeds(model, seed=s.seed + i) for i in range(s.verify.samples)], None
    return sample_feeds(model, load_samples(s.data.inputs) if samples is None else samples, s.data.inputs,
                        s.data.labels_key)


def prepare(s: Settings, target_static_shapes: bool, progress: Progress = print) -> Prepared:
    from metainfer_core.normalize.equivalence import MAX_SAMPLES
    from metainfer_core.normalize.inputs import load_samples, sample_shapes
    from metainfer_core.normalize.shapes import bind_input_shapes, unknown_negative_dims

    t0 = time.perf_counter()
    original, source = _load(s)
    sha = hashlib.sha256(original.SerializeToString()).hexdigest()
    progress(f"normalize: {len(original.graph.node)} nodes from {source}")
    input_shapes = s.model.input_shapes or None
    samples = load_samples(s.data.inputs) if s.data.inputs is not None else None
    if samples is not None:     # dims model.input_shapes leaves symbolic take the samples' sizes
        input_shapes, taken = sample_shapes(original, samples, input_shapes)
        if taken:
            progress("normalize: binding " + ", ".join(f"{k} to {v}" for k, v in taken.items())
                     + f" (the samples' shape in data.inputs={s.data.inputs})")
    unbound = unbound_inputs(original, input_shapes) if target_static_shapes else {}
    if unbound:  # refused before normalize spends time on the model
        listed = ", ".join(f"{k!r} {v if v is not None else '(rank unknown)'}" for k, v in unbound.items())
        example = ",".join(f"{k}:[{','.join(str(d) if isinstance(d, int) else '1' for d in v)}]" if v is not None
                           else f"{k}:[<all its dims>]" for k, v in unbound.items())
        raise MetaInferError(f"Target {s.target.name} needs static shapes, but model {source} has dynamic input(s) "
                             f"{listed} that model.input_shapes does not bind. Bind each to its deployment size for "
                             f"this run, e.g. 'model.input_shapes={{{example}}}' (quoted for the shell; each 1 "
                             "stands for a symbolic dim: put the real size).")
    feeds, labels = None, None
    if samples is not None:     # real inputs for normalize's equivalence check and shape filling too
        feeds, labels = _validation_feeds(s, bind_input_shapes(unknown_negative_dims(original), input_shapes), samples)
    result = normalize(original, input_shapes=input_shapes, seed=s.seed, feeds=feeds)
    for warning in result.warnings:
        progress(f"WARNING: normalize: {warning}")
    progress(f"normalize: {result.nodes_before} -> {result.nodes_after} nodes, max output error "
             f"{max(result.max_abs_err.values(), default=0.0):.2e}"
             + (f" on {min(len(feeds), MAX_SAMPLES)} sample(s) of data.inputs" if feeds else " on random inputs"))
    if feeds is None:
        feeds, labels = _validation_feeds(s, result.model)
    else:                       # the inputs normalize kept (an unused input may be gone)
        fed = {i.name for i in result.model.graph.input}
        feeds = [{k: v for k, v in f.items() if k in fed} for f in feeds]
    if s.accuracy.metric == "top1" and labels is None:
        progress("accuracy: metric top1 without labels in data.inputs: measuring top-1 agreement with fp32")
    reference = run_cpu(result.model, feeds)
    names = [o.name for o in result.model.graph.output]
    degenerate = degenerate_outputs(reference, names)
    if degenerate:
        progress(f"WARNING: reference outputs {degenerate} are near-constant on the validation inputs, so accuracy "
                 "figures for them mean little; give real inputs with data.inputs=<file.npz>")
    return Prepared(s.model.name, source, sha, result, model_feature_map(result.model), feeds, reference, degenerate,
                    make_loss(s.accuracy.metric, labels), time.perf_counter() - t0)


def _space(s: Settings) -> dict[str, dict]:
    return {name: dict(domain) for name, domain in s.action_space.actions.items()}


def profiling_variants(s: Settings, prepared: Prepared, backend: Backend) -> list[onnx.ModelProto]:
    """The graph plus one variant per (action, parameter choice, site), and each lossless
    action again on top of each low-precision variant (int8 kernels fused, tiled or
    channels-last exist only there), so the library holds the kernels the search will ask the
    predictor about. The profiler measures each distinct kernel once."""
    ctx = ActionContext(target=backend.info, calibration_feeds=prepared.feeds)
    space = _space(s)

    def rewrites(model: onnx.ModelProto, lossy: bool | None) -> list[tuple[onnx.ModelProto, bool]]:
        out = []
        for name, domain in space.items():
            action = ACTIONS[name]
            if lossy is not None and action.lossy != lossy:
                continue
            for params in action.choices(domain):
                for site in action.sites(model, params, ctx.target):
                    if action.legal(model, site, params, ctx.target) is None:
                        try:
                            out.append((action.apply(model, site, params, ctx), action.lossy))
                        except Exception:  # noqa: BLE001 - the search reports rewrites that fail
                            pass
        return out

    first = rewrites(prepared.model, None)
    return [prepared.model] + [m for m, _ in first] + [v for m, lossy in first if lossy for v, _ in rewrites(m, False)]


def profile_stage(s: Settings, prepared: Prepared, backend: Backend, progress: Progress = print,
                  allowance_s: float | None = None) -> ProfileReport:
    """allowance_s: the profile's share of budget.total_s; what it leaves is measured next run."""
    t0 = time.perf_counter()
    library = FingerprintLibrary(s.tracking.fingerprint_db)
    version = library.register_version(backend.info)
    key = set_key(prepared.model, _space(s), s.profile.batch_gradient)
    done = profiled_kernels(library, version, key)
    if done is not None:
        progress(f"profile: this graph and action space are already profiled in {version} ({done} kernels)")
        return ProfileReport(version, measured=0, reused=done)
    variants = profiling_variants(s, prepared, backend)
    limit = f" (up to {eta(allowance_s)})" if allowance_s is not None else ""
    last = [0.0]

    def tick(done: int, total: int) -> None:
        now = time.perf_counter() - t0
        if done == total or now - last[0] > 5:      # a line every few seconds, with the time left
            last[0] = now
            left = now / done * (total - done)
            if allowance_s is not None:
                left = min(left, max(0.0, allowance_s - now))
            progress(f"profile: {done}/{total} kernel measurements, ~{eta(left)} left{limit}")

    report = profile(backend, library, variants, s.profile.batch_gradient, s.profile.reps, s.profile.warmup, tick,
                     deadline_s=None if allowance_s is None else allowance_s - (time.perf_counter() - t0))
    report.seconds = time.perf_counter() - t0
    if not report.skipped and not report.left:  # an unfinished set is carried on next time
        mark_profiled(library, version, key, report.measured + report.reused)
    progress(f"profile: {report.measured} measured, {report.reused} reused from library "
             f"{report.fingerprint_version} in {report.seconds:.1f}s"
             + (f"; {report.left} measurements left for the next run (the profile's share of budget.total_s="
                f"{s.budget.total_s:g} is spent; the predictor estimates those kernels)" if report.left else ""))
    return report


def predictor_folder(s: Settings, fingerprint_version: str) -> Path:
    """Where a fingerprint version's predictor revisions live."""
    return s.artifacts / "predictors" / fingerprint_version


def train_stage(s: Settings, fingerprint_version: str, progress: Progress = print) -> tuple[CostModel, bool]:
    """The predictor of this fingerprint version: kernel records plus whole-model runs (zoo
    runs from flows/train.py, runtime runs from verify and deployments). The current revision
    is re-used while the library has not grown; first, recent verify runs are checked for
    calibration drift (past predictor.drift_threshold the predictor is marked stale)."""
    from metainfer_core.predictor import PredictorStore, TargetSpec, calibration, kernel_params

    library = FingerprintLibrary(s.tracking.fingerprint_db)
    folder = predictor_folder(s, fingerprint_version)
    p = s.predictor
    if p.frozen and PredictorStore(folder).current() is not None:
        cm = CostModel.load(folder)
        progress(f"train: frozen CatBoost predictor r{cm.meta.revision} (predictor.frozen)")
        return cm, False
    was_stale = PredictorStore(folder).stale() is not None
    drift = calibration.check(library, fingerprint_version, folder, p.drift_threshold, p.drift_window)
    if drift.stale and not was_stale:
        progress(f"train: predictor calibration drifted (measured/predicted {drift.ratio:.3f} over {drift.runs} "
                 f"verified runs, reference {drift.reference:.3f}): marked stale for re-profiling")
    cm, trained = load_or_train(library.training_records(fingerprint_version), fingerprint_version, folder,
                                seed=s.seed, spec=TargetSpec.from_spec(s.target.name, s.target.spec),
                                plan_runs=library.plan_runs(fingerprint_version),
                                params=kernel_params(p.iterations, p.learning_rate, p.depth), ridge=p.ridge)
    progress(f"train: {cm.meta.kind if trained else 'reused'} CatBoost predictor r{cm.meta.revision} on "
             f"{cm.meta.n_records} kernel records and {cm.meta.n_plan_runs} whole-model runs "
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
                 progress: Progress = print, allowance_s: float | None = None) -> SearchOutcome:
    """allowance_s: the search's share of budget.total_s (search.time_budget_s caps it too)."""
    from metainfer_core.accuracy import plan_loss
    from metainfer_core.search.beam import expansions as search_expansions

    t0 = time.perf_counter()
    info = backend.info
    weights = Weights(s.weights.latency, s.weights.memory, s.weights.accuracy, s.weights.change_penalty)
    lossy = {n for n, a in ACTIONS.items() if a.lossy}
    ctx = ActionContext(target=info, calibration_feeds=prepared.feeds)
    evaluator = Evaluator(cost_model, info, weights, s.accuracy.max_loss, prepared.feeds, prepared.reference, lossy,
                          ctx=ctx, loss_fn=getattr(prepared, "loss_fn", None) or plan_loss,
                          paths=path_costs(s, prepared, backend))
    default = Candidate(prepared.model)
    t_eval = time.perf_counter()
    evaluator.set_baseline(default)
    t_eval = time.perf_counter() - t_eval
    if default.latency_ms < s.search.skip_below_ms:
        reason = (f"default plan predicted at {default.latency_ms:.3g} ms, below search.skip_below_ms="
                  f"{s.search.skip_below_ms}: the search would cost more than it can save")
        progress(f"search: skipped ({reason})")
        return SearchOutcome(None, reason, default, time.perf_counter() - t0)
    # adaptive switch, second part: even a plan at 0 ms saves at most the default's latency on each
    # of the runs the plan will serve; skip when that cannot pay back the expected search time
    root = SearchResult(default=default, top=[])
    n_root = sum(1 for _ in search_expansions(default, _space(s), ctx, root))
    expected_candidates = n_root * (1 + s.search.beam_width * (s.search.depth - 1))
    # what is left of the allowance after measuring the paths and the baseline
    left = allowance_s - (time.perf_counter() - t0) if allowance_s is not None else float("inf")
    budget_s = max(1.0, min(s.search.time_budget_s, left))
    expected_search_s = min(expected_candidates * 2 * t_eval, budget_s)
    saving_s = default.latency_ms * s.search.expected_runs / 1e3
    if n_root and saving_s < expected_search_s:
        reason = (f"default plan predicted at {default.latency_ms:.3g} ms: over search.expected_runs="
                  f"{s.search.expected_runs} runs even a 0 ms plan saves at most {saving_s:.3g} s, below the expected "
                  f"search cost of {expected_search_s:.3g} s ({expected_candidates} candidates at ~{2 * t_eval:.3g} s)")
        progress(f"search: skipped ({reason})")
        return SearchOutcome(None, reason, default, time.perf_counter() - t0,
                             {"expected_search_s": expected_search_s, "possible_saving_s": saving_s})

    def tick(level: int, frontier: int, best: float, beam: int) -> None:
        spent = time.perf_counter() - t0
        # each level expands a beam of the same width: the levels left cost about what these did
        left = min(spent / level * (s.search.depth - level), max(0.0, budget_s - spent)) if level else 0.0
        progress(f"search: depth {level}/{s.search.depth}, beam {beam}/{s.search.beam_width}, {frontier} new "
                 f"candidates within the bounds, best score {f'{best:.4f}' if best == best else 'none yet'} "
                 f"(default {default.score:.4f}), "
                 f"{spent:.1f}s, ~{eta(left)} left")

    progress(f"search: up to {eta(budget_s)} (" + ("its share of budget.total_s" if budget_s < s.search.time_budget_s
                                                else "search.time_budget_s") + ")")
    result = beam_search(prepared.model, _space(s), evaluator, ctx, s.search.beam_width, s.search.depth,
                         s.search.top_k, budget_s, tick, explore=explore_count(s, default))
    best = result.top[0] if result.top else None
    progress(f"search: {result.evaluated} candidates scored ({result.duplicates} duplicates merged), "
             f"{len(result.top)} better than default, {result.search_s:.1f}s "
             f"(apply {result.timings.get('apply_s', 0):.1f}s, evaluate {result.timings.get('evaluate_s', 0):.1f}s, "
             f"sensitivity {result.timings.get('sensitivity_s', 0):.1f}s)"
             + (f"; best: {' > '.join(st.kind for st in best.steps)}, {best.binding.get('device', 0)} kernels on the "
                f"device, {len(best.binding.get('host', []))} on the host" if best else
                f"; nothing within the hard bounds (pruned: {result.pruned})" if result.pruned else ""))
    return SearchOutcome(result, None, result.default, time.perf_counter() - t0,
                         {"search_timings": result.timings, "expected_search_s": expected_search_s,
                          "possible_saving_s": saving_s,
                          "execution_paths": evaluator.paths.measured if evaluator.paths else {}})


EXPLORE_VERIFY_S = 15.0     # what verifying the explored plans may add, at most (predicted)


def explore_count(s: Settings, default: Candidate) -> int:
    """search.explore, fewer where verifying that many more plans would take long."""
    per_plan_s = s.verify.runs * (1 + SETTLE) * max(default.latency_ms, 1e-6) / 1e3   # each timed run after its settle runs
    return max(0, min(s.search.explore, int(EXPLORE_VERIFY_S / per_plan_s)))


def path_costs(s: Settings, prepared: Prepared, backend: Backend) -> PathCosts | None:
    """The execution paths the search may bind to, measured on demand; None where the target
    offers only its default path. A runtime the action space asks for by name that the target
    does not offer is refused with one paragraph."""
    offered = backend.info.extra.get("execution_paths") or []
    domain = s.action_space.actions.get("binding")
    if domain is None:
        return None
    asked = domain.get("runtime")
    runtimes = {ExecutionPath.parse(label).runtime for label in offered} | {"onnxruntime"}
    missing = sorted(set([asked] if isinstance(asked, str) else asked or []) - runtimes)
    if missing:
        absent = missing_paths(s.target.spec)
        raise MetaInferError(
            f"The action space asks the binding action for runtime(s) {missing}, which target {s.target.name} does not "
            f"offer (it offers {sorted(offered) or 'its default path only'}). "
            + (f"The package(s) {absent} are not installed in this environment: install them (they are pinned in "
               "requirements.lock), " if absent else f"List them under execution_paths in conf/target/{s.target.name}.yaml, ")
            + "or drop them from action_space's binding domain.")
    return PathCosts(backend, prepared.feeds, prepared.reference, prepared.loss_fn) if len(offered) > 1 else None


@dataclass
class VerifyOutcome:
    baseline: Verified
    candidates: list[Verified]
    plans: list[Candidate]              # aligned with candidates: the search's top-K, then guard repairs
    repairs: list[dict]
    seconds: float


def _guard(s: Settings, prepared: Prepared, backend: Backend, top: list[Candidate], cost_model: CostModel | None,
           progress: Progress) -> tuple[list[Candidate], list[dict]]:
    """Low-precision candidates that break the accuracy bound on the validation inputs get a
    repaired twin with the culprit nodes pinned to fp32 (both are verified: the difference is
    what the pinning costs)."""
    lossy = {n for n, a in ACTIONS.items() if a.lossy}
    ctx = ActionContext(target=backend.info, calibration_feeds=prepared.feeds)
    extra, repairs = [], []
    for i, c in enumerate(top):
        if not any(st.kind in lossy for st in c.steps) or not ExecutionPath.of(c.model).is_default:
            continue        # a plan bound to another path: verify measures its loss there and decide rejects it over the bound
        try:
            loss = prepared.loss_fn(prepared.reference, run_cpu(c.model, prepared.feeds))
            if loss <= s.accuracy.max_loss:
                continue
            r = repair(prepared.model, c.steps, c.model, ctx, prepared.feeds, prepared.reference, s.accuracy.max_loss,
                       s.verify.repair_budget, prepared.loss_fn)
        except Exception as exc:  # noqa: BLE001 - verify reports the candidate's own failure; no repair for it
            progress(f"verify: candidate{i + 1} could not be checked for repair ({type(exc).__name__}); verified as it is")
            continue
        entry = {"candidate": f"candidate{i + 1}", "culprits": r.culprits, "loss_before": r.loss_before,
                 "loss_after": r.loss_after, "evaluations": r.evaluations, "repaired": r.ok, "repaired_as": None}
        if r.ok:
            predicted = cost_model.predict_ms(group_kernels(r.model)) if cost_model is not None else float("nan")
            extra.append(Candidate(r.model, r.steps, latency_ms=predicted, peak_mem_bytes=c.peak_mem_bytes,
                                   accuracy_loss=r.loss_after, score=float("nan")))
            entry["repaired_as"] = f"candidate{len(top) + len(extra)}"
        progress(f"verify: {entry['candidate']} breaks the accuracy bound ({r.loss_before:.3g}); pinned "
                 f"{r.culprits or 'nothing'} to fp32 -> {r.loss_after:.3g} ({'repaired' if r.ok else 'gave up'})")
        repairs.append(entry)
    return top + extra, repairs


MIN_VERIFY_RUNS = 7     # the median and p90 of fewer timed runs say little


def verify_runs(s: Settings, plans: list[Candidate], default: Candidate | None, n_feeds: int,
                allowance_s: float | None) -> tuple[int, float]:
    """(timed rounds, predicted seconds): verify.runs, fewer where timing that many rounds of
    every plan (each timed run after its settle runs; the default twice: verify's late twin),
    after each plan's accuracy runs on the validation inputs and its warm-up, would overrun the
    verify allowance (predicted latencies)."""
    ms = [c.latency_ms for c in [default, default, *plans] if c is not None and c.latency_ms == c.latency_ms]
    per_round_s = sum(ms) * (1 + SETTLE) / 1e3
    fixed_s = sum(ms) * (s.verify.warmup + n_feeds) / 1e3
    runs = s.verify.runs
    if allowance_s is not None and per_round_s > 0:
        runs = int(max(MIN_VERIFY_RUNS, min(s.verify.runs, (allowance_s - fixed_s) / per_round_s)))
    return runs, fixed_s + runs * per_round_s


def verify_stage(s: Settings, prepared: Prepared, backend: Backend, outcome: SearchOutcome,
                 progress: Progress = print, cost_model: CostModel | None = None,
                 measure: Callable[..., list[Verified]] = verify, allowance_s: float | None = None) -> VerifyOutcome:
    """measure: verify()'s signature; another host's verify for deploy.remote_verify.
    allowance_s: verify's share of budget.total_s (bounds the number of timed rounds)."""
    t0 = time.perf_counter()
    plans, repairs = _guard(s, prepared, backend, list(outcome.result.top) if outcome.result else [], cost_model,
                            progress)
    models = [("default", prepared.model)] + [(f"candidate{i + 1}", c.model) for i, c in enumerate(plans)]
    left = allowance_s - (time.perf_counter() - t0) if allowance_s is not None else None
    runs, expected_s = verify_runs(s, plans, outcome.default, len(prepared.feeds), left)
    progress(f"verify: {len(models)} plans on {backend.info.name} ({backend.info.measurement}), "
             f"{runs} interleaved runs each, ~{eta(expected_s)} plus compiles"
             + (f" (fewer than verify.runs={s.verify.runs}: the verify share of budget.total_s)" if runs < s.verify.runs
                else ""))
    results = measure(backend, models, prepared.feeds, prepared.reference, runs, s.verify.warmup,
                      prepared.loss_fn)
    by_label = {v.label: v for v in results}
    for r in repairs:       # what pinning cost: the repaired plan against the plan it came from
        fixed, orig = by_label.get(r["repaired_as"]), by_label.get(r["candidate"])
        r["latency_cost_ms"] = (fixed.latency_ms - orig.latency_ms) if fixed and orig and fixed.ok and orig.ok else None
    return VerifyOutcome(results[0], results[1:], plans, repairs, time.perf_counter() - t0)


def decide_stage(s: Settings, backend: Backend, outcome: SearchOutcome, verified: VerifyOutcome) -> tuple[Decision, Candidate | None]:
    if outcome.skipped_reason:
        return Decision("skipped", outcome.skipped_reason, None), None
    if not verified.plans:
        default, limit = outcome.default, backend.info.memory_limit_bytes
        if outcome.result and outcome.result.pruned.get("memory") and default.peak_mem_bytes > limit:
            lean = outcome.result.leanest or default
            return Decision("default", f"no plan fits the device memory limit: the default needs {default.peak_mem_bytes} B "
                                       f"(limit {limit} B) and all {outcome.result.pruned['memory']} candidates over the "
                                       f"limit were pruned; the leanest ({_plan_words(lean)}) needs {lean.peak_mem_bytes} B: "
                                       f"{_peak_reason(lean.model, backend.info)}; the default is kept but does not fit "
                                       "this device", None), None
        return Decision("default", "the search found no plan predicted to beat the default", None), None
    d = decide(verified.baseline, verified.candidates, s.accuracy.max_loss, backend.info.memory_limit_bytes,
               objective(s), [c.changes for c in verified.plans])
    return d, (verified.plans[d.chosen] if d.chosen is not None else None)


def _plan_words(c: Candidate) -> str:
    return " + ".join(step.kind for step in c.steps) or "the default"


def _peak_reason(model: onnx.ModelProto, info) -> str:
    """Which tensors make the model's planned peak on the target (memory.peak_reason)."""
    infos = tensor_infos(model)
    kernels = group_kernels(model, infos)
    inits = {i.name for i in model.graph.initializer}
    plan = plan_memory(kernels, infos, [i.name for i in model.graph.input if i.name not in inits],
                       model_strategy(model, info.extra.get("memory_strategy", DEFAULT_STRATEGY)),
                       {o.name for o in model.graph.output},
                       streamed_weights=bool(info.extra.get("weights_streamed")))
    return peak_reason(plan, kernels, info.memory_limit_bytes, infos)


def objective(s: Settings) -> Objective:
    """The search's weights, for choosing among verified plans on measured values."""
    w = s.weights
    return Objective(w.latency, w.memory, w.accuracy, w.change_penalty)


def calibration_stage(s: Settings, prepared: Prepared, backend: Backend, outcome: SearchOutcome,
                      verified: VerifyOutcome, predictor_version: str) -> dict:
    """Write every verified plan's measured latency, with its prediction, back to the library
    as runtime runs (fine-tuning learns from them) and return the calibration ratio."""
    pairs = [(prepared.model, outcome.default.latency_ms, verified.baseline, "default")]
    pairs += [(c.model, c.latency_ms, v, v.label) for c, v in zip(verified.plans, verified.candidates)]
    by_path: dict[ExecutionPath, list] = {}
    for model, predicted, v, label in pairs:
        if v.ok and v.samples_ms:
            by_path.setdefault(ExecutionPath.of(model), []).append(
                runtime_run(model, prepared.name, v.samples_ms, f"verify:{label}", v.peak_mem_bytes,
                            predicted if predicted == predicted else None, predictor_version))   # NaN: not predicted
    library = FingerprintLibrary(s.tracking.fingerprint_db)
    for path, runs in by_path.items():     # each path's runs under its own fingerprint version
        info = backend.info if path.is_default else backend.path_backend(path).info
        record_runtime(library, info, runs)
    # the predictor's calibration: default-path runs (other paths' predictions carry a measured ratio)
    runs = by_path.get(ExecutionPath(), [])
    ratio = calibration_ratio([{"median_ms": r.timing.median_ms, "predicted_ms": r.predicted_ms} for r in runs])
    return {"runs_recorded": sum(len(r) for r in by_path.values()), "measured_over_predicted": ratio,
            "runs_by_path": {p.label: len(r) for p, r in by_path.items()}}
