"""Re-profiling tasks: drift check and re-measurement, predictor refresh, re-verification of
the target's active plans. Thin wrappers over metainfer_core; registry access via tasks.tracking."""
from __future__ import annotations

import tempfile
from pathlib import Path

import onnx
from prefect import task
from prefect.cache_policies import NO_CACHE

from metainfer_core import stages
from metainfer_core.accuracy import run_cpu
from metainfer_core.decide import decide
from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.predictor import PredictorStore, offline
from metainfer_core.reprofile import DriftReport, reprofile
from metainfer_core.reprofile_predictor import carry_over, has_new_runtime_runs
from metainfer_core.settings import validate_settings
from metainfer_core.tensors import random_feeds
from metainfer_core.verify import verify
from tasks.adapt_tasks import _progress
from tasks.tracking import active_plans, download_plan, restore_default
from tasks.train_tasks import predictor_folder


@task(name="drift_check", cache_policy=NO_CACHE)
def drift_task(raw: dict) -> DriftReport:
    s = validate_settings(raw)
    report = reprofile(stages.make_backend(s), FingerprintLibrary(s.tracking.fingerprint_db), s.reprofile.threshold,
                       s.profile.reps, s.profile.warmup)
    _progress(f"reprofile: {report.old_version} -> {report.new_version}; drifted {report.drifted or 'nothing'}; "
              f"{report.remeasured} re-measured, {report.carried} carried over in {report.seconds:.1f}s")
    return report


@task(name="refresh_predictor", cache_policy=NO_CACHE)
def refresh_predictor_task(raw: dict, report: DriftReport) -> dict | None:
    """A new fingerprint version's predictor is fine-tuned from the previous version's (trained
    afresh when there is none, or when fine-tuning would predict worse); on the same version,
    the runtime runs stored since the predictor was trained fine-tune it. Either way the
    predictor is no longer stale."""
    s = validate_settings(raw)
    p = s.predictor
    library = FingerprintLibrary(s.tracking.fingerprint_db)
    folder = predictor_folder(s, report.new_version)
    out = None
    if report.version_changed:
        carried = carry_over(predictor_folder(s, report.old_version), folder, report.new_version,
                             library.training_records(report.new_version), library.plan_runs(report.new_version),
                             s.reprofile.fine_tune_iterations, s.reprofile.fine_tune_learning_rate,
                             p.fine_tune_tolerance)
        if carried is not None:
            _progress(f"reprofile: predictor {'fine-tuned' if carried.accepted else 'not fine-tuned'}: {carried.reason}")
        out = {"version": report.new_version, "action": "fine_tuned" if carried and carried.accepted else "trained",
               "carry_over": carried.as_dict() if carried else None}
        if not (carried and carried.accepted):
            cm, _ = stages.train_stage(s, report.new_version, _progress)
            out["revision"] = cm.meta.revision
        else:
            out["revision"] = carried.revision
    elif PredictorStore(folder).current() is not None and has_new_runtime_runs(library, report.new_version, folder):
        tuned = offline.fine_tune_from_library(library, report.new_version, folder, p.fine_tune_iterations,
                                               p.fine_tune_learning_rate, p.fine_tune_weight, p.fine_tune_tolerance,
                                               p.ridge)
        _progress(f"reprofile: predictor fine-tune on runtime runs {'kept' if tuned.accepted else 'refused'}: "
                  f"{tuned.reason}")
        out = {"version": report.new_version, "action": "fine_tuned" if tuned.accepted else "fine_tune_refused",
               "revision": tuned.current, "runtime_runs": tuned.n_runs, "reason": tuned.reason}
    if out is not None:
        PredictorStore(folder).clear_stale()
    return out


@task(name="reverify_active_plans", cache_policy=NO_CACHE)
def reverify_task(raw: dict) -> list[dict]:
    """Verify each active adapted plan against its default path on the target as it is now;
    a plan that no longer beats the default beyond noise is rolled back to the default."""
    s = validate_settings(raw)
    backend = stages.make_backend(s)
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
        d = decide(base, [cand], s.accuracy.max_loss, backend.info.memory_limit_bytes, stages.objective(s))
        if d.decision == "adapted":
            results.append(entry | {"decision": "kept", "reason": d.reason})
        else:
            new_version = restore_default(s, version, d.reason)
            results.append(entry | {"decision": "rolled_back", "reason": d.reason, "now_active": new_version})
        _progress(f"reprofile: {version.name} v{version.version}: {results[-1]['decision']} ({d.reason})")
    return results
