"""`python flows/adapt.py` on a model it cannot use, as a user runs it: exit code 2, one "error:"
paragraph on stderr that names the file, node or input and says what to do, no traceback, no
plan line and no run folder. (Bad configuration values are in test_flow_adapt.py; each stage's
own wording is unit-tested beside it, e.g. tests/normalize/test_loader.py.)"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from metainfer_core.zoo import build


def _truncated(path: Path) -> None:
    path.write_bytes(build("mlp").SerializeToString()[:200])


def _not_onnx(path: Path) -> None:
    path.write_text("this is not an onnx model\n")


def _custom_op(path: Path) -> None:
    nodes = [
        helper.make_node("Relu", ["input"], ["r"], name="relu0"),
        helper.make_node("Frobnicate", ["r"], ["y"], name="frob1", domain="acme.ops"),
    ]
    graph = helper.make_graph(nodes, "custom", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("acme.ops", 1)]),
              path)


def _symbolic_batch(path: Path) -> None:
    onnx.save(build("mlp"), path)  # input 'input' is [batch, 256]


# case -> (writes the file (None: no file), extra overrides, fragments the error must contain)
CASES = {
    "truncated": (_truncated, [], ["model.onnx", "corrupt, truncated or not ONNX", "re-export"]),
    "not_onnx": (_not_onnx, [], ["model.onnx", "not a readable ONNX model", "re-export"]),
    "missing": (None, [], ["model.onnx", "does not exist"]),
    "custom_op": (_custom_op, [],
                  ["'frob1'", "'Frobnicate'", "'acme.ops'", "re-export the model with standard ONNX ops"]),
    "unbound_on_npu": (_symbolic_batch, ["target=npu"],
                       ["model.onnx", "needs static shapes", "'input' ['batch', 256]",
                        "'model.input_shapes={input:[1,256]}'"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_unusable_model_fails_with_one_paragraph_and_writes_nothing(run_flow, tmp_path, case):
    write, overrides, fragments = CASES[case]
    path = tmp_path / "model.onnx"
    if write is not None:
        write(path)
    artifacts = tmp_path / "artifacts"
    res = run_flow("adapt", "model=file", f"model.path={path}", *overrides, "search=quick",
                   f"paths.artifacts={artifacts}")
    assert res.returncode == 2, res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, res.stderr
    for fragment in fragments:
        assert fragment in errors[0], (fragment, errors[0])
    assert "Traceback" not in res.stderr and "plan:" not in res.stdout
    assert not any((artifacts / "runs").glob("*"))


def _samples(path: Path, arr) -> Path:
    if path.suffix == ".npy":
        np.save(path, arr)
    else:
        np.savez(path, input=arr)
    return path


def _with(value, at):
    arr = np.random.default_rng(0).standard_normal((3, 1, 256)).astype(np.float32)
    arr[at] = value
    return arr


# validation data the mlp (input 'input' [batch, 256], bound to [1, 256]) cannot use (issue 17):
# case -> (file name, array, fragments the error must contain)
BAD_INPUTS = {
    "npy": ("samples.npy", np.zeros((3, 1, 256), np.float32), ["samples.npy", "an .npy file", "numpy.savez"]),
    "nan": ("nan.npz", _with(np.nan, (1, 0, 5)), ["nan.npz", "'input'", "1 NaN", "sample 1", "replace or drop"]),
    "inf": ("inf.npz", _with(np.inf, (2, 0, 0)), ["inf.npz", "'input'", "1 Inf", "sample 2"]),
    "complex": ("complex.npz", np.ones((3, 1, 256), np.complex64), ["complex.npz", "'input'", "complex64",
                                                                     "imaginary part"]),
    "no_sample": ("empty.npz", np.zeros((0, 1, 256), np.float32), ["empty.npz", "'input'", "no sample",
                                                                    "[0, 1, 256]"]),
    "zero_size_dim": ("zerodim.npz", np.zeros((3, 0, 256), np.float32), ["zerodim.npz", "'input'", "[3, 0, 256]",
                                                                          "size 0"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_validation_data_is_refused_before_work_starts(run_flow, tmp_path, case):
    name, arr, fragments = BAD_INPUTS[case]
    path = _samples(tmp_path / name, arr)
    artifacts = tmp_path / "artifacts"
    res = run_flow("adapt", "model=mlp", "search=quick", f"data.inputs={path}", f"paths.artifacts={artifacts}")
    assert res.returncode == 2, res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, res.stderr
    for fragment in fragments:
        assert fragment in errors[0], (fragment, errors[0])
    assert "data.inputs" in errors[0] and "Traceback" not in res.stderr and "plan:" not in res.stdout
    assert not artifacts.exists(), list(artifacts.rglob("*"))     # no run folder, no MLflow run, no store
