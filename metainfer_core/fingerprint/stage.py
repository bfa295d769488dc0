"""The profile stage: the kernels of the graph and of every variant the action space makes of
it, measured on the target within the profile's share of the budget (fingerprint/profiler.py
measures; this decides what to measure and what is already known)."""
from __future__ import annotations

import time
from typing import Callable

import onnx

from metainfer_core.actions import ActionContext, expand
from metainfer_core.backends import Backend
from metainfer_core.budget import eta
from metainfer_core.fingerprint.library import FingerprintLibrary
from metainfer_core.fingerprint.profiled_sets import mark_profiled, profiled_kernels, set_key
from metainfer_core.fingerprint.profiler import ProfileReport, profile
from metainfer_core.fingerprint.thread_counts import counts_that_matter, profile_threads
from metainfer_core.prepare.stage import Prepared
from metainfer_core.settings import Settings

Progress = Callable[[str], None]


def profiling_variants(s: Settings, prepared: Prepared, backend: Backend,
                       deadline: float = float("inf")) -> list[onnx.ModelProto]:
    """The graph plus one variant per (action, parameter choice, site), and each lossless
    action again on top of each low-precision variant (int8 kernels fused, tiled or
    channels-last exist only there), so the library holds the kernels the search will ask the
    predictor about. The profiler measures each distinct kernel once. None is rewritten past
    `deadline` (time.perf_counter()): on a large detector the rewrites alone took more than
    the profile's share and left the search seconds."""
    ctx = ActionContext(target=backend.info, calibration_feeds=prepared.feeds, cache=prepared.action_cache)
    space = s.action_space.domains()

    def rewrites(model: onnx.ModelProto, lossy: bool | None) -> list[tuple[onnx.ModelProto, bool]]:
        out = []
        for action, params, site in expand(model, space, ctx.target, lossy=lossy, calibrating=False):
            if time.perf_counter() > deadline:
                break
            try:
                out.append((action.apply(model, site, params, ctx), action.lossy))
            except Exception:  # noqa: BLE001 - the search reports rewrites that fail
                pass
        return out

    first = rewrites(prepared.model, None)
    return [prepared.model] + [m for m, _ in first] + [v for m, lossy in first if lossy for v, _ in rewrites(m, False)]


VARIANTS_SHARE = 0.5     # of the profile's share, at most, for rewriting the graph into its variants


def profile_stage(s: Settings, prepared: Prepared, backend: Backend, progress: Progress = print,
                  allowance_s: float | None = None) -> ProfileReport:
    """allowance_s: the profile's share of budget.total_s; what it leaves is measured next run.
    Where several requests share a measured host's cores, the graph's kernels are also measured
    at the other thread counts its sessions would run at (fingerprint/thread_counts.py)."""
    report = _profile_variants(s, prepared, backend, progress, allowance_s)
    threads = counts_that_matter(s.serving.cores, s.serving.concurrency, s.serving.request_threads)
    if threads and backend.info.measurement == "measured":
        profile_threads(backend, FingerprintLibrary(s.tracking.fingerprint_db), prepared.model, prepared.name,
                        prepared.feeds[0], threads, s.profile.reps, s.profile.warmup, progress)
    return report


def _profile_variants(s: Settings, prepared: Prepared, backend: Backend, progress: Progress,
                      allowance_s: float | None) -> ProfileReport:
    t0 = time.perf_counter()
    library = FingerprintLibrary(s.tracking.fingerprint_db)
    version = library.register_version(backend.info)
    key = set_key(prepared.model, s.action_space.domains(), s.profile.batch_gradient)
    done = profiled_kernels(library, version, key)
    if done is not None:
        progress(f"profile: this graph and action space are already profiled in {version} ({done} kernels)")
        return ProfileReport(version, measured=0, reused=done)
    # the rewrites get at most half the share: the other half measures their kernels
    deadline = t0 + VARIANTS_SHARE * allowance_s if allowance_s is not None else float("inf")
    variants = profiling_variants(s, prepared, backend, deadline)
    cut = time.perf_counter() > deadline        # some variants never made: the set is not complete
    if cut:
        progress(f"profile: rewriting the graph into its variants took half the profile's share; {len(variants)} "
                 "variants made, the rest left to the predictor")
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
    if not report.skipped and not report.left and not cut:  # an unfinished set is carried on next time
        mark_profiled(library, version, key, report.measured + report.reused)
    progress(f"profile: {report.measured} measured, {report.reused} reused from library "
             f"{report.fingerprint_version} in {report.seconds:.1f}s"
             + (f"; {report.left} measurements left for the next run (the profile's share of budget.total_s="
                f"{s.budget.total_s:g} is spent; the predictor estimates those kernels)" if report.left else ""))
    return report
