"""The offline training set of one target: micro-benchmarks of every kernel of every
candidate plan of the zoo models (into the fingerprint library), plus whole-model runs of
those plans (stored in the library too, with each plan's kernel graph and, on a measured
target with a profiler, each kernel's time inside the graph: in_graph). What is already in
the library for this fingerprint version is not measured again."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import onnx

from metainfer_core import zoo
from metainfer_core.backends.base import Backend, Timing
from metainfer_core.backends.timing import interleaved, settle_runs
from metainfer_core.fingerprint.library import FingerprintLibrary, PlanRun
from metainfer_core.fingerprint.profiler import distinct_kernels, kernel_model, profile
from metainfer_core.ir.kernels import group_kernels
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.normalize import normalize
from metainfer_core.predictor.dataset import in_graph
from metainfer_core.predictor.dataset.plans import Plan, candidate_plans
from metainfer_core.predictor.features.plan_graph import describe

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


def measure_plans(backend: Backend, models: list[onnx.ModelProto], feed: dict[str, np.ndarray] | list[dict],
                  runs: int, warmup: int) -> list[Timing | None]:
    """Whole-model latency of each graph, timed in interleaved rounds of warm runs (timing.interleaved)
    so a shared machine's drift hits all alike; None for a graph the target cannot run. `feed`:
    one for all graphs, or one per graph."""
    feeds = feed if isinstance(feed, list) else [feed] * len(models)
    compiled = []
    for m, f in zip(models, feeds):
        try:
            c = backend.compile(m)
            for _ in range(max(warmup, 1)):
                c.time_once(f)
            compiled.append(c)
        except Exception:  # noqa: BLE001 - a plan that fails to run is left out, not fatal
            compiled.append(None)
    samples = interleaved(compiled, feeds, runs, settle_runs(backend))
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
          progress: Progress | None = None, plan_warmup: int | None = None,
          profile_runs: int = in_graph.PROFILE_RUNS) -> BuildReport:
    info = backend.info
    version = library.register_version(info)
    report = BuildReport(version)
    t0 = time.perf_counter()
    done = {m for m, _ in library.known_plans(version)}
    # on a measured target every new plan of every model is timed (and profiled) in the same
    # interleaved rounds: a shared machine's load, which moves by tens of percent from minute
    # to minute, then hits all models alike instead of scaling each model's runs by the load of
    # its own minute. A simulator's noise does not drift: each model's plans right after its
    # micro-benchmarks, as always.
    together = info.measurement == "measured"
    todo: list[tuple[ZooEntry, list[Plan], list[str]]] = []
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
        todo.append((e, plans, record_keys(models, batch_gradient)))
        if progress:
            progress(f"train set: {e.name}: {len(plans)} plans, {prof.measured} kernels measured "
                     f"({prof.reused} reused)")
        if not together:
            _time_and_store(backend, library, todo, runs, warmup if plan_warmup is None else plan_warmup, 0, report)
            todo = []
    if todo:
        n = _time_and_store(backend, library, todo, runs, warmup if plan_warmup is None else plan_warmup,
                            profile_runs, report)
        if progress:
            progress(f"train set: {n} plans of {len(todo)} models timed together ({runs} interleaved rounds, "
                     f"then profiled in graph over {profile_runs})")
    report.seconds = time.perf_counter() - t0
    return report


def _time_and_store(backend: Backend, library: FingerprintLibrary, todo: list[tuple[ZooEntry, list[Plan], list[str]]],
                    runs: int, warmup: int, profile_runs: int, report: BuildReport) -> int:
    """Time the plans of `todo` in one interleaved set of rounds, profile them in graph where
    the backend can (in_graph), store the runs; returns how many plans were timed."""
    info = backend.info
    flat = [(e, p) for e, plans, _ in todo for p in plans]
    models = [p.model for _, p in flat]
    feeds = [e.feeds[0] for e, _ in flat]
    timings = measure_plans(backend, models, feeds, runs, warmup)
    profiles = in_graph.profile_plans(backend, models, feeds, profile_runs)
    i = 0
    for e, plans, keys in todo:
        stored = []
        for p in plans:
            t, profiled = timings[i], profiles[i]
            i += 1
            if t is None:
                report.skipped.append(f"{e.name}: {p.label} does not run on {info.name}")
                continue
            graph = describe(p.model)
            if profiled is not None:
                graph[in_graph.KEY] = profiled
            graph["record_keys"] = keys if not p.steps else []    # once per model, on its default plan
            stored.append(PlanRun(e.name, p.key, p.label, graph, t, source="zoo"))
        report.plans_measured += library.add_plan_runs(info, stored)
        report.plans += len(plans)
        report.models += 1
    return len(flat)
