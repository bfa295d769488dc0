"""The train flow's Prefect tasks: thin wrappers over metainfer_core.predictor. Settings
travel as plain dicts (stable to hash and to serialise)."""
from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from app.settings import validate_settings
from metainfer_core.backends import backend_for
from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.predictor import dataset
from metainfer_core.predictor.features.target_join import TargetSpec
from metainfer_core.predictor.lifecycle import offline
from metainfer_core.predictor.lifecycle.fine_tune import FineTuneResult
from metainfer_core.predictor.stage import predictor_folder  # noqa: F401 - flows/train.py takes it from here
from tasks.adapt_tasks import _progress


@task(name="build_training_set", cache_policy=NO_CACHE)
def build_training_set_task(raw: dict, shapes: dict[str, dict[str, list[int]]]) -> dataset.BuildReport:
    s = validate_settings(raw)
    backend = backend_for(s)
    entries = dataset.zoo_entries(shapes, s.seed, s.verify.samples)
    p = s.predictor
    report = dataset.build(backend, FingerprintLibrary(s.tracking.fingerprint_db), entries, s.action_space.domains(),
                           s.profile.batch_gradient, s.profile.reps, s.profile.warmup, p.runs, p.plan_depth,
                           p.max_plans, _progress, plan_warmup=p.warmup)
    _progress(f"train set: {report.models} models, {report.plans_measured} plans measured "
              f"({report.plans_reused} re-used), {report.kernels_measured} kernels measured in {report.seconds:.1f}s")
    return report


@task(name="train_predictor_offline", cache_policy=NO_CACHE)
def train_offline_task(raw: dict, version: str) -> offline.TrainReport:
    s = validate_settings(raw)
    p = s.predictor
    report = offline.train(FingerprintLibrary(s.tracking.fingerprint_db), version,
                           TargetSpec.from_spec(s.target.name, s.target.spec), predictor_folder(s, version),
                           offline.kernel_params(p.iterations, p.learning_rate, p.depth), p.ridge, p.lomo, s.seed,
                           _progress)
    lomo = report.metrics.get("lomo")
    if lomo:
        _progress(f"train: leave-one-model-out MAPE {lomo['mape']:.1%}, within ±10 % {lomo['within_10']:.0%}, "
                  f"mean Spearman {lomo['spearman_mean']:.3f} over {lomo['plans']} plans of {lomo['models']} models")
    return report


@task(name="fine_tune_predictor", cache_policy=NO_CACHE)
def fine_tune_task(raw: dict, version: str) -> FineTuneResult:
    s = validate_settings(raw)
    p = s.predictor
    result = offline.fine_tune_from_library(FingerprintLibrary(s.tracking.fingerprint_db), version,
                                            predictor_folder(s, version), p.fine_tune_iterations,
                                            p.fine_tune_learning_rate, p.fine_tune_weight, p.fine_tune_tolerance,
                                            p.ridge)
    _progress(f"fine-tune: {'kept' if result.accepted else 'refused'}: {result.reason}")
    return result
