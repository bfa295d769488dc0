"""Re-profiling tasks: drift check and re-measurement, predictor refresh, re-verification of
the target's active plans. Thin wrappers over metainfer_core; registry access via app.tracking."""
from __future__ import annotations

import tempfile
from pathlib import Path

import onnx
from prefect import task
from prefect.cache_policies import NO_CACHE

from app.settings import validate_settings
from app.tracking.registry import active_plans, download_plan, restore_default
from metainfer_core.accuracy.metric import run_cpu
from metainfer_core.backends import backend_for
from metainfer_core.decide.stage import decide
from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.fingerprint.reprofile import DriftReport, reprofile
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.predictor.lifecycle.reprofiled import path_predictors, refresh
from metainfer_core.search.score import Weights
from metainfer_core.verify import verify
from tasks.adapt_tasks import _progress


@task(name="drift_check", cache_policy=NO_CACHE)
def drift_task(raw: dict) -> DriftReport:
    s = validate_settings(raw)
    report = reprofile(backend_for(s), FingerprintLibrary(s.tracking.fingerprint_db), s.reprofile.threshold,
                       s.profile.reps, s.profile.warmup)
    for r in report.all_paths():
        _progress(f"reprofile: {r.old_version} -> {r.new_version} ({r.path}: {r.status}); drifted {r.drifted or 'nothing'}; "
                  f"{r.remeasured} re-measured, {r.carried} carried over, {r.seeded} seeded in {r.seconds:.1f}s")
    return report


@task(name="refresh_predictor", cache_policy=NO_CACHE)
def refresh_predictor_task(raw: dict, report: DriftReport) -> dict | None:
    return refresh(validate_settings(raw), report, _progress)


@task(name="path_predictors", cache_policy=NO_CACHE)
def path_predictors_task(raw: dict, report: DriftReport) -> list[dict]:
    """The target's other execution paths: what re-profiling does for their predictor (nothing)."""
    return path_predictors(validate_settings(raw), report)


@task(name="reverify_active_plans", cache_policy=NO_CACHE)
def reverify_task(raw: dict) -> list[dict]:
    """Verify each active adapted plan against its default path on the target as it is now;
    a plan that no longer beats the default beyond noise is rolled back to the default."""
    s = validate_settings(raw)
    backend = backend_for(s)
    results = []
    for version in active_plans(s):
        entry = {"registered_model": version.name, "version": str(version.version)}
        if version.tags.get("decision") != "adapted":
            results.append(entry | {"decision": "kept", "reason": "the active plan is the default path"})
            continue
        with tempfile.TemporaryDirectory(prefix="metainfer-reverify-") as tmp:
            active_path, default_path = download_plan(s, version, Path(tmp))
            active, default = onnx.load(str(active_path)), onnx.load(str(default_path))
        feeds = [random_feeds(default, seed=s.seed + i) for i in range(s.verify.samples)]
        base, cand = verify(backend, [("default", default), ("active", active)], feeds, run_cpu(default, feeds),
                            s.verify.runs, s.verify.warmup)
        d = decide(base, [cand], s.accuracy.max_loss, backend.info.memory_limit_bytes,
                   Weights.of(s.weights, s.serving.under_load), memory_budget=backend.info.memory_budget)
        if d.decision == "adapted":
            results.append(entry | {"decision": "kept", "reason": d.reason})
        else:
            new_version = restore_default(s, version, d.reason)
            results.append(entry | {"decision": "rolled_back", "reason": d.reason, "now_active": new_version})
        _progress(f"reprofile: {version.name} v{version.version}: {results[-1]['decision']} ({d.reason})")
    return results
