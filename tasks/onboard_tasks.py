"""Onboarding checklist tasks: thin wrappers over metainfer_core.fingerprint.onboard."""
from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from app.settings import validate_settings
from metainfer_core.backends import backend_for
from metainfer_core.fingerprint import onboard
from metainfer_core.fingerprint import FingerprintLibrary


def _ctx(raw: dict):
    s = validate_settings(raw)
    return s, backend_for(s)


@task(name="zoo_models", cache_policy=NO_CACHE)
def zoo_models_task() -> list:
    return onboard.zoo_models()


@task(name="capabilities", cache_policy=NO_CACHE)
def capabilities_task(raw: dict, models: list, ops: list[str]) -> onboard.Item:
    _, backend = _ctx(raw)
    return onboard.check_capabilities(backend, models, ops)


@task(name="microbench", cache_policy=NO_CACHE)
def microbench_task(raw: dict, models: list, ops: list[str]) -> onboard.Item:
    s, backend = _ctx(raw)
    return onboard.check_microbench(backend, FingerprintLibrary(s.tracking.fingerprint_db), models, ops,
                                    s.profile.batch_gradient, s.profile.reps, s.profile.warmup)


@task(name="minimal_model", cache_policy=NO_CACHE)
def minimal_model_task(raw: dict, model) -> tuple[onboard.Item, onboard.Item]:
    _, backend = _ctx(raw)
    return onboard.check_minimal_model(backend, model)


@task(name="concurrency", cache_policy=NO_CACHE)
def concurrency_task(raw: dict, model) -> onboard.Item:
    _, backend = _ctx(raw)
    return onboard.check_concurrency(backend, model)


@task(name="execution_paths", cache_policy=NO_CACHE)
def execution_paths_task(raw: dict, model) -> onboard.Item:
    s, backend = _ctx(raw)
    return onboard.check_execution_paths(backend, model, library=FingerprintLibrary(s.tracking.fingerprint_db),
                                         reps=s.profile.reps, warmup=s.profile.warmup)


@task(name="versions", cache_policy=NO_CACHE)
def versions_task(raw: dict) -> onboard.Item:
    _, backend = _ctx(raw)
    return onboard.check_versions(backend)
