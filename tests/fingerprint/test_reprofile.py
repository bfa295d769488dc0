"""Drift detection and re-profiling after a firmware change (issue 8), on a modeled target."""
from __future__ import annotations

import pytest

from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.fingerprint.profiler import profile
from metainfer_core.normalize import normalize
from metainfer_core.fingerprint.reprofile import markdown, reprofile
from metainfer_core.zoo import build

from twins import backend


@pytest.fixture
def library(tmp_path):
    lib = FingerprintLibrary(f"sqlite:///{tmp_path}/fp.db")
    model = normalize(build("resnet_tiny"), {"input": [1, 3, 64, 64]}).model
    profile(backend("fpga"), lib, [model], [1, 2], reps=5, warmup=0)
    return lib


def test_no_drift_remeasures_nothing(library):
    rep = reprofile(backend("fpga"), library, threshold=0.1, reps=5, warmup=0)
    assert not rep.version_changed and rep.drifted == [] and rep.remeasured == 0
    assert len(rep.checks) == 3                              # the quick validation set


def test_firmware_slowing_two_ops_remeasures_only_them(library):
    old_version = library.versions("fpga")[0]
    before = library.records(old_version)
    new_fw = backend("fpga", firmware="sim-fpga-bit-1.0", op_slowdown={"Conv": 1.3, "MaxPool": 1.3})
    rep = reprofile(new_fw, library, threshold=0.1, reps=5, warmup=0)
    assert rep.version_changed and rep.old_version == old_version
    assert rep.drifted == ["Conv", "MaxPool"]
    by_op = {c.op_type: c.ratio for c in rep.checks}
    assert by_op["Conv"] == pytest.approx(1.3, rel=0.08) and by_op["Relu"] == pytest.approx(1.0, rel=0.08)
    n_drifted = sum(1 for r in before if r["op_type"] in ("Conv", "MaxPool"))
    assert rep.remeasured == n_drifted and rep.carried == len(before) - n_drifted
    new = {r["kernel_key"]: r for r in library.records(rep.new_version)}
    assert {r["source"] for r in new.values() if r["op_type"] == "Conv"} == {"microbench"}
    assert {r["source"] for r in new.values() if r["op_type"] == "Relu"} == {"carried"}
    assert library.records(old_version) == before              # nothing of the old version is lost


def test_new_version_predictor_is_fine_tuned_from_the_previous_one(library, tmp_path):
    from metainfer_core.predictor import CostModel, PredictorStore
    from metainfer_core.predictor.lifecycle.reprofiled import carry_over

    old_version = library.versions("fpga")[0]
    old_folder, new_folder = tmp_path / "pred" / "old", tmp_path / "pred" / "new"
    old = CostModel.train(library.training_records(old_version), old_version, 0)
    PredictorStore(old_folder).set_current(old.save(old_folder))
    assert carry_over(tmp_path / "pred" / "none", new_folder, "x", [], [], 10, 0.1) is None   # nothing to start from
    rep = reprofile(backend("fpga", firmware="sim-fpga-bit-1.0", op_slowdown={"Conv": 1.3, "MaxPool": 1.3}),
                    library, threshold=0.1, reps=5, warmup=0)
    result = carry_over(old_folder, new_folder, rep.new_version, library.training_records(rep.new_version), [],
                        100, 0.1)
    assert result.accepted and result.parent == f"{old_version}/r1" and result.n_remeasured == rep.remeasured
    # the previous predictor misses the 30 % by about 23 %; continuing its trees on the new records fixes most of it
    assert result.held_out_before > 0.15 and result.held_out_after < result.held_out_before / 2
    tuned = CostModel.load(new_folder)
    assert tuned.meta.fingerprint_version == rep.new_version and tuned.meta.kind == "fine_tuned"
    assert PredictorStore(old_folder).revisions() == [1] and CostModel.load(old_folder).meta.fingerprint_version == old_version
    assert PredictorStore(new_folder).history()[-1]["event"] == "fine_tuned_from_previous_version"


# --- every execution path of the cpu target (ONNX Runtime, OpenVINO f32 / bf16), measured for real ---

def _cpu(**spec_changes):
    from app.compose import target_backend

    return target_backend("cpu", **spec_changes)


def _ov_hint(hint: str) -> dict:
    """The cpu spec's OpenVINO paths with another performance hint: a new version of those paths only."""
    import yaml

    from app.compose import CONF_DIR

    paths = yaml.safe_load((CONF_DIR / "target" / "cpu.yaml").read_text())["spec"]["execution_paths"]
    return {**paths, "openvino": {**paths["openvino"], "performance_hint": hint}}


@pytest.fixture
def cpu_library(tmp_path):
    import openvino  # noqa: F401  (pinned in requirements.lock: the cpu paths below are OpenVINO's)
    lib = FingerprintLibrary(f"sqlite:///{tmp_path}/fp.db")
    profile(_cpu(), lib, [normalize(build("mlp"), {"input": [1, 256]}).model], [1], reps=5, warmup=1)
    return lib


def test_cpu_paths_are_seeded_then_compared_each_under_its_own_version(cpu_library):
    lib, cpu = cpu_library, _cpu()
    others = [p for p in cpu.info.extra["execution_paths"] if p != "onnxruntime"]
    assert "openvino:f32" in others
    first = reprofile(cpu, lib, threshold=0.1, reps=5, warmup=1)
    assert [r.path for r in first.all_paths()] == ["onnxruntime", *others]
    assert first.path == "onnxruntime" and first.status in ("no drift", "drift") and len(first.checks) >= 2
    default_keys = {c.kernel_key for c in first.checks}
    versions = {r.path: r.new_version for r in first.all_paths()}
    assert len(set(versions.values())) == len(versions)                   # each path its own version
    for r in first.paths:                  # no kernel record on the path yet: the default's check kernels seeded
        assert r.status == "seeded" and not r.checks and r.seeded == len(default_keys), r.failed
        recs = lib.records(r.new_version)
        assert {x["kernel_key"] for x in recs} == default_keys and {x["source"] for x in recs} == {"microbench"}
        assert r.runtime.startswith("openvino-")
    default_recs = lib.records(first.new_version)
    assert {r["kernel_key"] for r in default_recs} > default_keys          # the default version: all its kernels
    second = reprofile(_cpu(), lib, threshold=0.1, reps=5, warmup=1)
    assert {r.path: r.new_version for r in second.all_paths()} == versions
    for r in second.paths:                 # now compared with the path's own records, nothing seeded again
        assert r.status in ("no drift", "drift") and r.seeded == 0 and not r.version_changed
        assert {c.kernel_key for c in r.checks} == default_keys
        ov = {x["kernel_key"]: x["median_ms"] for x in lib.records(r.new_version)}
        assert all(c.library_ms == ov[c.kernel_key] for c in r.checks)
    assert lib.records(first.new_version) == default_recs                  # the default version untouched
    d = second.as_dict()
    assert [p["path"] for p in d["paths"]] == others and all("ratio" in c for p in d["paths"] for c in p["checks"])
    md = markdown(second, [], None)
    assert all(f"| {p} |" in md for p in ["onnxruntime", *others])


def test_a_path_version_change_is_a_new_version_of_that_path_only(cpu_library):
    lib = cpu_library
    first = reprofile(_cpu(), lib, threshold=0.1, reps=5, warmup=1)            # seeds the OpenVINO paths
    before = {r.path: lib.records(r.new_version) for r in first.all_paths()}
    changed = reprofile(_cpu(execution_paths=_ov_hint("THROUGHPUT")), lib, threshold=0.1, reps=5, warmup=1)
    assert not changed.version_changed and changed.new_version == first.new_version
    for old, new in zip(first.paths, changed.paths):
        assert new.path == old.path and new.version_changed
        assert new.old_version == old.new_version and new.new_version not in {r.new_version for r in first.all_paths()}
        assert new.status in ("no drift", "drift") and len(new.checks) == len(before[old.path])   # every op type checked
        recs = lib.records(new.new_version)             # the new version complete: re-measured or carried
        assert new.remeasured + new.carried == len(before[old.path]) == len(recs)
        assert {r["source"] for r in recs} <= {"microbench", "carried"}
        assert lib.records(old.new_version) == before[old.path]                 # the old version untouched
    # the default path's own version change still compares with the default path's version line,
    # not with the newer OpenVINO versions
    ort = reprofile(_cpu(execution_paths=_ov_hint("THROUGHPUT"), graph_optimization_level="ORT_ENABLE_EXTENDED"),
                    lib, threshold=0.1, reps=5, warmup=1)
    assert ort.version_changed and ort.old_version == first.new_version
    assert ort.remeasured + ort.carried + ort.unmeasurable == len(before["onnxruntime"])
    assert all(not p.version_changed and p.status != "seeded" for p in ort.paths)


def test_seed_paths_gives_the_quick_set_to_every_path(cpu_library):
    from metainfer_core.fingerprint.reprofile import seed_paths

    seeded = seed_paths(_cpu(), cpu_library, reps=5, warmup=1)
    assert seeded and all(r.status == "seeded" and r.seeded >= 2 for r in seeded)
    assert all(r.status == "already seeded" for r in seed_paths(_cpu(), cpu_library, reps=5, warmup=1))
    rep = reprofile(_cpu(), cpu_library, threshold=0.1, reps=5, warmup=1)
    assert all(r.status in ("no drift", "drift") and r.seeded == 0 for r in rep.paths)


def test_onboarding_seeds_the_paths_drift_baseline(cpu_library):
    from metainfer_core.fingerprint.onboard import check_execution_paths

    item = check_execution_paths(_cpu(), normalize(build("mlp"), {"input": [1, 256]}).model, runs=3,
                                 library=cpu_library, reps=5, warmup=1)
    paths = item.data["paths"]
    assert item.passed and "drift_baseline" not in paths["onnxruntime"]
    assert all(paths[p]["drift_baseline"]["status"] == "seeded" for p in paths if p != "onnxruntime")
    assert "drift baseline seeded" in item.detail


def test_a_modeled_target_has_only_its_default_path(library):
    rep = reprofile(backend("fpga"), library, threshold=0.1, reps=5, warmup=0)
    assert rep.path == "default" and rep.paths == [] and rep.status == "no drift"
