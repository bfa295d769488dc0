"""The verify stage: the accuracy guard's repaired twins of lossy plans over the bound, then
the default and every candidate measured on the target (verify/measure.py), with as many timed
rounds as the verify share of the budget allows."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from metainfer_core.accuracy.guard import repair
from metainfer_core.accuracy.metric import run_cpu
from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.backends import Backend
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.backends.timing import runs_per_sample
from metainfer_core.budget import eta
from metainfer_core.ir.kernels import group_kernels
from metainfer_core.predictor import CostModel
from metainfer_core.prepare.stage import Prepared
from metainfer_core.search.candidate import Candidate
from metainfer_core.search.stage import SearchOutcome
from metainfer_core.settings import Settings
from metainfer_core.verify.measure import MIN_ROUNDS, Runner, Verified, VerifyResult, with_accuracy
from metainfer_core.verify.worker import run_plans_isolated

Progress = Callable[[str], None]


@dataclass
class VerifyOutcome:
    baseline: Verified
    candidates: list[Verified]
    plans: list[Candidate]              # aligned with candidates: the search's top-K, then guard repairs
    repairs: list[dict]
    seconds: float


def _guard(s: Settings, prepared: Prepared, backend: Backend, top: list[Candidate], cost_model: CostModel | None,
           progress: Progress) -> tuple[list[Candidate], list[dict]]:
    """Low-precision candidates that break the accuracy bound on the samples that judge it (the
    held-out ones) get a repaired twin with the culprit nodes pinned to fp32 (both are verified:
    the difference is what the pinning costs). Culprits are looked for on the calibration samples
    only, so the held-out ones stay unseen: where those show no culprit, no twin is made."""
    lossy = {n for n, a in ACTIONS.items() if a.lossy}
    ctx = ActionContext(target=backend.info, calibration_feeds=prepared.feeds, cache=prepared.action_cache)
    extra, repairs = [], []
    for i, c in enumerate(top):
        if not any(st.kind in lossy for st in c.steps) or not ExecutionPath.of(c.model).is_default:
            continue        # a plan bound to another path: verify measures its loss there and decide rejects it over the bound
        try:        # judged where verify judges it (held-out samples); repaired on the calibration ones
            judge = prepared.judge
            loss = judge.loss_fn(judge.reference, run_cpu(c.model, judge.feeds))
            if loss <= s.accuracy.max_loss:
                continue
            r = repair(prepared.model, c.steps, c.model, ctx, prepared.feeds, prepared.reference, s.accuracy.max_loss,
                       s.verify.repair_budget, prepared.loss_fn)
        except Exception as exc:  # noqa: BLE001 - verify reports the candidate's own failure; no repair for it
            progress(f"verify: candidate{i + 1} could not be checked for repair ({type(exc).__name__}); verified as it is")
            continue
        entry = {"candidate": f"candidate{i + 1}", "culprits": r.culprits, "loss_before": r.loss_before,
                 "loss_after": r.loss_after, "evaluations": r.evaluations, "repaired": r.ok and bool(r.culprits),
                 "repaired_as": None, "held_out_loss": loss}
        if r.ok and not r.culprits:
            progress(f"verify: {entry['candidate']} breaks the accuracy bound on the held-out samples ({loss:.3g}) but "
                     f"not on the calibration samples ({r.loss_before:.3g}): no culprit to pin, not repaired")
            repairs.append(entry)
            continue
        if r.ok:
            predicted = cost_model.predict_ms(group_kernels(r.model)) if cost_model is not None else float("nan")
            extra.append(Candidate(r.model, r.steps, latency_ms=predicted, peak_mem_bytes=c.peak_mem_bytes,
                                   planned_peak_bytes=c.planned_peak_bytes,
                                   accuracy_loss=r.loss_after, score=float("nan")))
            entry["repaired_as"] = f"candidate{len(top) + len(extra)}"
        progress(f"verify: {entry['candidate']} breaks the accuracy bound ({loss:.3g} held out, {r.loss_before:.3g} "
                 f"on the calibration samples); pinned "
                 f"{r.culprits or 'nothing'} to fp32 -> {r.loss_after:.3g} ({'repaired' if r.ok else 'gave up'})")
        repairs.append(entry)
    return top + extra, repairs


def _judge_points(prepared: Prepared, models: list[tuple[str, object]], measured: VerifyResult, n_feeds: int,
                  progress: Progress) -> None:
    """Each plan's accuracy loss at the shape range's other points, from the outputs the target
    produced there (taken off the end of its outputs); a plan that failed names the point where
    it does not run (a rewrite that fixed a dim the range varies)."""
    for (label, model), r in zip(models, measured.results):
        if r.error is not None:
            where = _failing_point(prepared, model)
            if where:
                r.error = f"does not run at {where}: {r.error}"
            continue
        outputs = measured.outputs[label]
        measured.outputs[label], at = outputs[:n_feeds], n_feeds
        for point, ss in prepared.point_sets:
            got = outputs[at:at + len(ss.feeds)]
            at += len(ss.feeds)
            wrong = _shape_mismatch(ss.reference, got)
            if wrong is None:
                try:
                    r.point_losses[point.name] = float(ss.loss_fn(ss.reference, got))
                except Exception as exc:  # noqa: BLE001 - as in verify(): the plan is rejected, not the run
                    wrong = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            if wrong is not None:
                r.error = f"wrong outputs at {point.name} ({point.where()}): {wrong}"
                r.samples_ms, r.latency_ms, r.p90_ms = [], float("nan"), float("nan")
                break
    shown = [f"{p.name} {p.where()}" for p, _ in prepared.point_sets]
    progress(f"verify: every plan also ran at {', '.join(shown)} (accuracy there against the original)")


def _shape_mismatch(reference: list[list[np.ndarray]], outputs: list[list[np.ndarray]]) -> str | None:
    """Where a plan's outputs differ in shape from the original's (a rewrite that fixed a size
    the range varies can run and still compute the tuned shape's rows only)."""
    for rs, os_ in zip(reference, outputs):
        for k, (r, o) in enumerate(zip(rs, os_)):
            if np.shape(r) != np.shape(o):
                return f"output {k} has shape {list(np.shape(o))}, the original's {list(np.shape(r))}"
    return None


def _runs_worth(point_feeds: list[dict], tuned: dict) -> float:
    """The runs at the tuned shape that the runs at other points cost, by their inputs' sizes."""
    size = sum(np.size(v) for v in tuned.values()) or 1
    return sum(sum(np.size(v) for v in f.values()) for f in point_feeds) / size


def _failing_point(prepared: Prepared, model) -> str | None:
    """The first point of the range (tuned shape first) where ONNX Runtime cannot run `model`."""
    sets = [(None, prepared.feeds[:1])] + [(p, ss.feeds[:1]) for p, ss in prepared.point_sets]
    for point, feeds in sets:
        try:
            run_cpu(model, feeds)
        except Exception:  # noqa: BLE001 - this is the point it fails at
            return "the tuned shape" if point is None else f"{point.name} ({point.where()})"
    return None


def verify_runs(s: Settings, plans: list[Candidate], default: Candidate | None, n_feeds: int,
                allowance_s: float | None) -> tuple[int, float]:
    """(timed rounds, predicted seconds): verify.runs, fewer where timing that many rounds of
    every plan (each timed run after its settle runs; the default twice: verify's late twin),
    after each plan's accuracy runs on the validation inputs and its warm-up, would overrun the
    verify allowance (predicted latencies); more, up to verify.max_runs, where they fit in half
    of it: on a fast model, the usual rounds left two plans a few % apart ranked by noise (the
    slower one chosen), and there more rounds cost seconds."""
    ms = [c.latency_ms for c in [default, default, *plans] if c is not None and c.latency_ms == c.latency_ms]
    per_round_s = sum(m * runs_per_sample(m) for m in ms) / 1e3
    fixed_s = sum(ms) * (s.verify.warmup + n_feeds) / 1e3
    runs = s.verify.runs
    if allowance_s is not None and per_round_s > 0:
        runs = int(max(MIN_ROUNDS, min(s.verify.runs, (allowance_s - fixed_s) / per_round_s)))
        more = int(min(s.verify.max_runs, (EXTRA_ROUNDS_SHARE * allowance_s - fixed_s) / per_round_s))
        runs = max(runs, more)
    return runs, fixed_s + runs * per_round_s


EXTRA_ROUNDS_SHARE = 0.5    # of the verify allowance, at most, for rounds past verify.runs


def verify_stage(s: Settings, prepared: Prepared, backend: Backend, outcome: SearchOutcome,
                 progress: Progress = print, cost_model: CostModel | None = None,
                 measure: Runner = run_plans_isolated, allowance_s: float | None = None) -> VerifyOutcome:
    """measure: the runner (this host's, in a measurement process of its own; another host's for
    deploy.remote_verify). allowance_s: verify's share of budget.total_s (bounds the number of
    timed rounds). Each plan runs on the calibration samples, then the held-out ones: its
    accuracy loss is judged on the held-out ones, the calibration loss is kept beside it."""
    t0 = time.perf_counter()
    plans, repairs = _guard(s, prepared, backend, list(outcome.result.top) if outcome.result else [], cost_model,
                            progress)
    models = [("default", prepared.model)] + [(f"candidate{i + 1}", c.model) for i, c in enumerate(plans)]
    left = allowance_s - (time.perf_counter() - t0) if allowance_s is not None else None
    held = prepared.held_out
    feeds = prepared.feeds + (held.feeds if held is not None else [])
    point_feeds = [f for _, ss in prepared.point_sets for f in ss.feeds]   # the range's other points, run last
    runs, expected_s = verify_runs(s, plans, outcome.default, len(feeds) + _runs_worth(point_feeds, feeds[0]), left)
    progress(f"verify: {len(models)} plans on {backend.info.name} ({backend.info.measurement}), "
             f"{runs} interleaved runs each, ~{eta(expected_s)} plus compiles"
             + (f" (fewer than verify.runs={s.verify.runs}: the verify share of budget.total_s)" if runs < s.verify.runs
                else f" (more than verify.runs={s.verify.runs}: the verify share has room)" if runs > s.verify.runs
                else ""))
    left = allowance_s - (time.perf_counter() - t0) if allowance_s is not None else None
    measured = measure(backend, models, feeds + point_feeds, runs, s.verify.warmup, time_left_s=left)
    if measured.worker.get("why"):
        progress(f"WARNING: verify: measured in this process ({measured.worker['why']})")
    if prepared.point_sets:
        _judge_points(prepared, models, measured, len(feeds), progress)
    results = (with_accuracy(measured, held.reference, held.loss_fn, (prepared.reference, prepared.loss_fn))
               if held is not None else with_accuracy(measured, prepared.reference, prepared.loss_fn))
    by_label = {v.label: v for v in results}
    for r in repairs:       # what pinning cost: the repaired plan against the plan it came from
        fixed, orig = by_label.get(r["repaired_as"]), by_label.get(r["candidate"])
        r["latency_cost_ms"] = (fixed.latency_ms - orig.latency_ms) if fixed and orig and fixed.ok and orig.ok else None
    return VerifyOutcome(results[0], results[1:], plans, repairs, time.perf_counter() - t0)
