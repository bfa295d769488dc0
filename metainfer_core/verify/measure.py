"""Verification on the target: compile, warm up, then time the default plan and every
candidate in interleaved rounds of warm runs (timing.interleaved: drift of a shared machine and
the position within a round hit all alike; each timed run follows runs of the same graph, as
back-to-back inference does). Also peak memory and accuracy loss against the fp32 reference,
computed from the outputs the target itself produced."""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Protocol

import numpy as np
import onnx

from metainfer_core.accuracy.metric import LossFn, plan_loss
from metainfer_core.backends.base import Backend, Compiled
from metainfer_core.backends.timing import interleaved, scaled_reps, settle_runs

MIN_ROUNDS = 7     # the median and p90 of fewer timed runs say little


Outputs = list[list[np.ndarray]]         # outputs[sample][output]


class Runner(Protocol):
    """Who measures the plans for the verify stage: `run_plans` below on this host's backend,
    `verify.worker.run_plans_isolated` in a measurement process of its own, or a runner that has
    another host measure them (tasks/remote_verify_tasks.py: the verify mailbox, for
    deploy.remote_verify). Same arguments, the same figures back, one per model in order, with
    the outputs each plan produced on `feeds`: the accuracy loss is computed where the
    reference and the metric are (verify/stage.py)."""
    def __call__(self, backend: Backend, models: list[tuple[str, onnx.ModelProto]],
                 feeds: list[dict[str, np.ndarray]], runs: int, warmup: int,
                 time_left_s: float | None = None) -> "VerifyResult": ...


@dataclass
class Verified:
    label: str
    latency_ms: float = float("nan")      # median over timed runs
    p90_ms: float = float("nan")
    peak_mem_bytes: int = 0
    accuracy_loss: float = float("nan")     # on the samples that judge accuracy (held out from calibration)
    compile_s: float = 0.0
    error: str | None = None
    samples_ms: list[float] = field(default_factory=list)
    calibration_loss: float = float("nan")  # on the samples that calibrated the plans
    point_losses: dict[str, float] = field(default_factory=dict)  # at the shape range's other points, by name

    @property
    def ok(self) -> bool:
        return self.error is None

    def as_dict(self) -> dict:
        d = asdict(self)
        d.pop("samples_ms")
        return d


@dataclass
class VerifyResult:
    results: list[Verified]                 # aligned with the models measured
    outputs: dict[str, Outputs]             # label -> the target's outputs (plans that ran)
    worker: dict = field(default_factory=dict)


class _Counted:
    """The backend, counting compile() calls: verify() compiles the plans in order and computes
    a plan's loss before it compiles the next, so the count names the plan whose outputs came."""

    def __init__(self, backend: Backend):
        self.backend, self.compiled = backend, 0

    @property
    def info(self):
        return self.backend.info

    def compile(self, model: onnx.ModelProto):
        self.compiled += 1
        return self.backend.compile(model)


def run_plans(backend: Backend, models: list[tuple[str, onnx.ModelProto]], feeds: list[dict[str, np.ndarray]],
              runs: int, warmup: int, time_left_s: float | None = None) -> VerifyResult:
    """verify() on `backend` in this process, keeping the outputs each plan produced (no loss)."""
    counted, outputs = _Counted(backend), {}

    def capture(reference, produced) -> float:
        outputs[models[counted.compiled - 1][0]] = produced
        return float("nan")

    results = verify(counted, models, feeds, [], runs, warmup, capture, time_left_s)
    return VerifyResult(results, {r.label: outputs[r.label] for r in results if r.error is None})


def with_accuracy(result: VerifyResult, reference: Outputs, loss_fn: LossFn,
                  calibration: tuple[Outputs, LossFn] | None = None) -> list[Verified]:
    """Each plan's accuracy loss from the outputs the target produced, computed where the
    reference and the metric are; a plan whose outputs the loss function rejects is rejected.
    calibration: (its reference, its loss) where the outputs hold the calibration samples first
    and then those of `reference`, which judge; without it the same samples do both."""
    k = len(calibration[0]) if calibration is not None else 0
    out = []
    for r in result.results:
        if r.error is None:
            try:
                outputs = result.outputs[r.label]
                r.accuracy_loss = loss_fn(reference, outputs[k:])
                r.calibration_loss = (calibration[1](calibration[0], outputs[:k]) if calibration is not None
                                      else r.accuracy_loss)
            except Exception as exc:  # noqa: BLE001 - as in verify(): the plan is rejected, not the run
                r.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
                r.samples_ms, r.latency_ms, r.p90_ms, r.peak_mem_bytes = [], math.nan, math.nan, 0
        out.append(r)
    return out


def verify(backend: Backend, models: list[tuple[str, onnx.ModelProto]], feeds: list[dict[str, np.ndarray]],
           reference: list[list[np.ndarray]], runs: int, warmup: int, loss_fn: LossFn = plan_loss,
           time_left_s: float | None = None) -> list[Verified]:
    """time_left_s: fewer timed rounds than `runs` (never fewer than MIN_ROUNDS) where more would
    end past this many seconds from now."""
    deadline = time.perf_counter() + time_left_s if time_left_s is not None else None
    results = [Verified(label) for label, _ in models]
    compiled: list[Compiled | None] = []
    twin_warmup = 1         # the default's late twin: as many warm-up runs as the default, at least one
    for (label, model), res in zip(models, results):
        try:
            c = backend.compile(model)
            res.compile_s = c.compile_s
            t_run = time.perf_counter()
            outputs = [c.run(f) for f in feeds]
            run_ms = (time.perf_counter() - t_run) * 1e3 / max(len(feeds), 1)
            res.accuracy_loss = loss_fn(reference, outputs)
            res.peak_mem_bytes = c.peak_memory(feeds[0])
            warm = scaled_reps(1, warmup, run_ms)[1]      # a long graph's accuracy runs warmed it
            if res is results[0]:
                twin_warmup = max(1, warm)
            for _ in range(warm):
                c.time_once(feeds[0])
            compiled.append(c)
        except Exception as exc:  # noqa: BLE001 - a candidate that fails to run is rejected, not fatal
            res.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            compiled.append(None)
    live = [(c, res) for c, res in zip(compiled, results) if c is not None]
    # sessions created later run a few % faster on ONNX Runtime (an A/A copy of the default,
    # created after it, ran faster than the default), so the default is also compiled last and its
    # two sessions' times are averaged per round
    late = _late_twin(backend, models[0][1], feeds, twin_warmup) if len(live) > 1 and compiled[0] is not None else None
    if late is not None:
        live.append((late, Verified("default (late)")))
    for (_, res), xs in zip(live, interleaved([c for c, _ in live], [feeds[0]] * len(live), runs,
                                              settle_runs(backend), deadline, min(runs, MIN_ROUNDS))):
        res.samples_ms = xs
    if late is not None:
        early, twin = results[0].samples_ms, live[-1][1].samples_ms
        results[0].samples_ms = [(a + b) / 2 for a, b in zip(early, twin)]
    for res in results:
        if res.samples_ms:
            arr = np.asarray(res.samples_ms)
            res.latency_ms, res.p90_ms = float(np.median(arr)), float(np.percentile(arr, 90))
    return results


def _late_twin(backend: Backend, model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], warmup: int):
    try:
        c = backend.compile(model)
        for _ in range(warmup):
            c.time_once(feeds[0])
        return c
    except Exception:  # noqa: BLE001 - it compiled once already; without a twin the first session alone counts
        return None
