"""The offline training set of one target: micro-benchmarks of every kernel of every
candidate plan of the zoo models (into the fingerprint library), plus whole-model runs of
those plans (stored in the library too, with each plan's kernel graph). What is already in
the library for this fingerprint version is not measured again."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import onnx

from metainfer_core import zoo
from metainfer_core.backends.base import Backend, Timing
from metainfer_core.fingerprint.library import FingerprintLibrary, PlanRun
from metainfer_core.fingerprint.profiler import distinct_kernels, kernel_model, profile
from metainfer_core.kernels import group_kernels
from metainfer_core.normalize import normalize
from metainfer_core.predictor.plan_graph import describe
from metainfer_core.predictor.plans import Plan, candidate_plans
from metainfer_core.tensors import random_feeds

Progress = Callable[[str], None]


@dataclass
class ZooEntry:
    """A normalized model with its inputs (feeds[0] times runs; all feeds calibrate int8)."""
    name: str
    model: onnx.ModelProto
    feeds: list[dict[str, np.ndarray]]


def zoo_entries(shapes: dict[str, dict[str, list[int]]], seed: int = 0, samples: int = 4) -> list[ZooEntry]:
    """The zoo models normalized with their deployment shapes (conf/model/<name>.yaml), with
    seeded random inputs."""
    out = []
    for name, input_shapes in shapes.items():
        model = normalize(zoo.build(name, seed=seed), input_shapes=input_shapes or None, seed=seed).model
        out.append(ZooEntry(name, model, [random_feeds(model, seed=seed + i) for i in range(samples)]))
    return out


@dataclass
class BuildReport:
    fingerprint_version: str
    models: int = 0
    plans: int = 0
    kernels_measured: int = 0
    kernels_reused: int = 0
    plans_measured: int = 0
    plans_reused: int = 0
    seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)


def measure_plans(backend: Backend, models: list[onnx.ModelProto], feed: dict[str, np.ndarray], runs: int,
                  warmup: int) -> list[Timing | None]:
    """Whole-model latency of each graph, timed in interleaved rounds (A B C A B C ...) so a
    shared machine's drift hits all alike; None for a graph the target cannot run."""
    compiled = []
    for m in models:
        try:
            c = backend.compile(m)
            for _ in range(max(warmup, 1)):
                c.time_once(feed)
            compiled.append(c)
        except Exception:  # noqa: BLE001 - a plan that fails to run is left out, not fatal
            compiled.append(None)
    samples: list[list[float]] = [[] for _ in models]
    for _ in range(runs):
        for c, out in zip(compiled, samples):
            if c is not None:
                out.append(c.time_once(feed))
    return [Timing.from_samples(s) if s else None for s in samples]


def record_keys(plans: list[onnx.ModelProto], batch_gradient: list[int]) -> list[str]:
    """The library keys the profiler stores for these graphs' kernels (standalone, at every
    batch scale): which micro-benchmarks came from a model, for leave-one-model-out."""
    keys = set()
    for m, k, infos in distinct_kernels(plans):
        for scale in batch_gradient:
            try:
                ks = group_kernels(kernel_model(m, k, infos, scale))
            except Exception:  # noqa: BLE001 - the profiler skipped these too
                continue
            if len(ks) == 1:
                keys.add(ks[0].key())
    return sorted(keys)


def build(backend: Backend, library: FingerprintLibrary, entries: list[ZooEntry], space: dict[str, dict[str, Any]],
          batch_gradient: list[int], reps: int, warmup: int, runs: int, plan_depth: int = 2, max_plans: int = 40,
          progress: Progress | None = None, plan_warmup: int | None = None) -> BuildReport:
    info = backend.info
    version = library.register_version(info)
    report = BuildReport(version)
    t0 = time.perf_counter()
    done = {m for m, _ in library.known_plans(version)}
    for e in entries:
        if e.name in done:      # this version already holds the model's plans
            report.plans_reused += len(library.plan_runs(version, source="zoo", model=e.name))
            report.models += 1
            continue
        plans: list[Plan] = candidate_plans(e.model, space, info, e.feeds, plan_depth, max_plans)
        models = [p.model for p in plans]
        prof = profile(backend, library, models, batch_gradient, reps, warmup)
        report.kernels_measured += prof.measured
        report.kernels_reused += prof.reused
        keys = record_keys(models, batch_gradient)
        timings = measure_plans(backend, models, e.feeds[0], runs, warmup if plan_warmup is None else plan_warmup)
        stored = []
        for p, t in zip(plans, timings):
            if t is None:
                report.skipped.append(f"{e.name}: {p.label} does not run on {info.name}")
                continue
            graph = describe(p.model)
            graph["record_keys"] = keys if not p.steps else []    # once per model, on its default plan
            stored.append(PlanRun(e.name, p.key, p.label, graph, t, source="zoo"))
        report.plans_measured += library.add_plan_runs(info, stored)
        report.plans += len(plans)
        report.models += 1
        if progress:
            progress(f"train set: {e.name}: {len(plans)} plans, {prof.measured} kernels measured "
                     f"({prof.reused} reused)")
    report.seconds = time.perf_counter() - t0
    return report
