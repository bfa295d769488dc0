"""Config composition: every option of every group composes and validates; bad values fail
before any work with one paragraph naming the setting."""
from __future__ import annotations

import pytest

from app.compose import GROUPS, options
from metainfer_core.errors import MetaInferError


@pytest.mark.parametrize("group", GROUPS)
def test_every_group_option_composes(group, settings_for, tmp_path):
    for option in options(group):
        extra = [f"model.path={tmp_path / 'm.onnx'}"] if (group, option) == ("model", "file") else []
        if extra:
            (tmp_path / "m.onnx").write_bytes(b"")
        s = settings_for(f"{group}={option}", *extra)
        assert getattr(s, group).name in (option, "m")


def test_defaults(settings_for, tmp_path):
    s = settings_for()
    assert (s.model.name, s.target.name, s.weights.name) == ("resnet_tiny", "cpu", "balanced")
    assert s.tracking.mlflow_uri == f"sqlite:///{tmp_path}/mlflow.db"
    assert s.tracking.fingerprint_db.endswith(f"{tmp_path}/fingerprints.db")


def test_every_target_builds_a_backend(settings_for):
    from metainfer_core.backends import backend_for

    kinds = {}
    for t in options("target"):
        info = backend_for(settings_for(f"target={t}")).info
        kinds[t] = info.measurement
        assert info.fingerprint_version.startswith(t)
    assert kinds == {"cpu": "measured", "gpu": "modeled", "npu": "modeled", "fpga": "modeled", "asic": "modeled"}


@pytest.mark.parametrize("override, fragment", [
    ("weights.latency=-1", "weights.latency"),
    ("search.beam_width=0", "search.beam_width"),
    ("model=file", "model.path"),
    ("target=tpu", "Unknown target option 'tpu'"),
    ("weights=turbo", "Available: accuracy, balanced, embedded, latency"),
    ("accuracy.max_loss=2", "accuracy.max_loss"),
    ("search.depht=3", "search.depht"),
    ("data.inputs=/nonexistent/x.npz", "data.inputs"),
    ("model.name=resnet9000", "resnet9000"),
])
def test_bad_values_fail_with_one_paragraph(override, fragment, settings_for):
    with pytest.raises(MetaInferError) as exc:
        settings_for(override)
    msg = str(exc.value)
    assert fragment in msg
    assert "\n" not in msg


@pytest.mark.parametrize("overrides, fragment", [
    (["target=npu", "target.spec.peak_gflops={}"], "target.spec.peak_gflops={}"),        # not merged away
    (["target=gpu", "target.spec.peak_gflops.float16=-5"], "target.spec.peak_gflops.float16=-5"),
    (["target=fpga", "target.spec.dram_gbps=0"], "target.spec.dram_gbps=0"),
    (["target=asic", "target.spec.peak_gflops=banana"], "target.spec.peak_gflops='banana'"),
    (["target=npu", "target.spec.peak_gflops={int4: 5}"], "'float32', 'float16', 'bfloat16' or 'int8'"),
    (["target=npu", "target.spec.supported_ops=[Conv,Frob]"], "['Frob'] are not ONNX op names"),
    (["target=npu", "+target.spec.dram_gbsp=3"], "target.spec.dram_gbsp=3: is not a known spec key"),
    (["target=cpu", "target.spec.memory_limit_bytes=-1"], "target.spec.memory_limit_bytes=-1"),
])
def test_bad_target_spec_values_are_refused_naming_the_value(overrides, fragment, settings_for):
    with pytest.raises(MetaInferError) as exc:
        settings_for(*overrides)
    msg = str(exc.value)
    assert fragment in msg and "\n" not in msg
    assert f"conf/target/{overrides[0].split('=')[1]}.yaml" in msg


def test_a_replaced_peak_table_is_taken_as_given(settings_for):
    assert settings_for("target=npu", "target.spec.peak_gflops={int8: 50}").target.spec["peak_gflops"] == {"int8": 50}


def test_all_weights_zero_is_rejected(settings_for):
    with pytest.raises(MetaInferError, match="nothing to optimise"):
        settings_for("weights.latency=0", "weights.memory=0", "weights.accuracy=0")


def test_unknown_action_and_domain_value(settings_for):
    with pytest.raises(MetaInferError, match="unknown action"):
        settings_for("+action_space.actions.teleport={}")
    with pytest.raises(MetaInferError, match="not in its domain"):
        settings_for("action_space.actions.int8.calibrate_method=[Magic]")


def test_code_named_in_the_config_is_imported_only_when_trusted(settings_for, capsys):
    from metainfer_core.errors import MetaInferError

    # `this` prints the Zen of Python when imported: a refusal must not import it
    for override in ("accuracy.metric=this:x", "target._target_=this.Backend"):
        with pytest.raises(MetaInferError, match="trust_config_code=true"):
            settings_for(override)
        assert "Beautiful is better" not in capsys.readouterr().out
    assert settings_for("accuracy.metric=numpy:size", "trust_config_code=true").accuracy.metric == "numpy:size"
    with pytest.raises(MetaInferError, match="not an importable"):
        settings_for("accuracy.metric=no_such_module:f", "trust_config_code=true")
