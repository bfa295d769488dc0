"""A small offline training set shared by the predictor tests: four zoo models on the
modeled `npu` (simulated latencies: fast and repeatable), one action deep."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from metainfer_core.backends import Backend
from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.predictor import TargetSpec, kernel_params
from metainfer_core.predictor.dataset.training_set import BuildReport, build, zoo_entries
from app.compose import compose_raw, target_backend, zoo_input_shapes

MODELS = ["mlp", "resnet_tiny", "bert_tiny", "mobilenet_v2_tiny"]
PARAMS = kernel_params(200, 0.15, 6)       # fewer trees than the default: tests stay fast


def target(name: str) -> tuple[Backend, TargetSpec]:
    backend = target_backend(name)
    return backend, TargetSpec.from_spec(name, backend.spec)


@dataclass
class TrainingSet:
    library: FingerprintLibrary
    backend: Backend
    spec: TargetSpec
    report: BuildReport

    @property
    def version(self) -> str:
        return self.report.fingerprint_version

    def records(self) -> list[dict]:
        return self.library.training_records(self.version)

    def runs(self, source: str | None = "zoo") -> list[dict]:
        return self.library.plan_runs(self.version, source=source)


@pytest.fixture(scope="session")
def npu_set(tmp_path_factory) -> TrainingSet:
    backend, spec = target("npu")
    shapes = zoo_input_shapes(MODELS)
    space = compose_raw([])["action_space"]["actions"]
    library = FingerprintLibrary(f"sqlite:///{tmp_path_factory.mktemp('npu')}/fp.db")
    report = build(backend, library, zoo_entries(shapes, 0, 2), space, [1, 2], reps=3, warmup=0, runs=5,
                   plan_depth=1, max_plans=10)
    return TrainingSet(library, backend, spec, report)
