"""prepare_stage() with data.inputs (issue 20): the user's samples are checked against the model's
inputs before normalize and feed its equivalence check and shape filling, their shape binds the
dims model.input_shapes leaves symbolic, and normalize's warnings reach the progress log."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from metainfer_core.ir.tensors import tuned_shapes

from metainfer_core.prepare.stage import prepare_stage
from metainfer_core.errors import MetaInferError


def _ids_model(path, declared_output=("batch", "seq", 4)):
    """ids [batch, seq] -> Gather over a 5-row table -> Reshape to [-1, seq_len x 4] by an integer
    input (random values cannot stand for it) -> Relu; the output declared with a stale shape."""
    table = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"]),
             helper.make_node("Reshape", ["emb", "shape"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "ids", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
                                             helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(declared_output))],
                              [numpy_helper.from_array(table, "table")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def _samples(path, n=3, seq=6):
    rng = np.random.default_rng(1)
    np.savez(path, ids=rng.integers(0, 5, (n, 1, seq)), shape=np.tile(np.array([1, seq * 4]), (n, 1)))
    return path


def test_prepare_runs_normalize_on_the_samples_and_tunes_at_their_shape(settings_for, tmp_path):
    model = _ids_model(tmp_path / "ids.onnx")
    npz = _samples(tmp_path / "inputs.npz")
    s = settings_for("model=file", f"model.path={model}", f"data.inputs={npz}", "target=gpu")
    said: list[str] = []
    prepared = prepare_stage(s, False, progress=said.append)
    assert prepared.normalized.real_inputs
    assert len(prepared.feeds) == 3 and prepared.feeds[0]["ids"].shape == (1, 6)
    np.testing.assert_array_equal(prepared.feeds[2]["ids"], np.load(npz)["ids"][2])
    dims = [d.dim_param or d.dim_value for d in prepared.model.graph.input[0].type.tensor_type.shape.dim]
    assert all(isinstance(d, str) for d in dims)           # a dynamic target keeps the symbols ...
    assert tuned_shapes(prepared.model) == {"ids": [1, 6]}  # ... tuned at the samples' shape
    assert any("tuning ids to [1, 6]" in m for m in said)
    assert any("data.inputs" in m and "max output error" in m for m in said)
    # the output was declared rank 3; the graph computes rank 2: replaced, and said
    assert any(m.startswith("WARNING: normalize:") and "'y'" in m for m in said)
    assert len(prepared.model.graph.output[0].type.tensor_type.shape.dim) == 2   # sizes: data-dependent


def test_prepare_without_samples_names_the_input_that_needs_real_values(settings_for, tmp_path):
    model = _ids_model(tmp_path / "ids.onnx", declared_output=(1, 24))
    s = settings_for("model=file", f"model.path={model}", "model.input_shapes={ids:[1,6]}", "target=gpu")
    with pytest.raises(MetaInferError, match=r"'shape'.*data\.inputs=<file\.npz>"):
        prepare_stage(s, False, progress=lambda m: None)


def test_samples_missing_an_input_are_refused_before_normalize(settings_for, tmp_path):
    model = _ids_model(tmp_path / "ids.onnx")
    npz = tmp_path / "partial.npz"
    np.savez(npz, ids=np.zeros((2, 1, 6), np.int64))
    s = settings_for("model=file", f"model.path={model}", f"data.inputs={npz}", "target=gpu")
    with pytest.raises(MetaInferError, match=r"no array for model input\(s\) \['shape'\]"):
        prepare_stage(s, False, progress=lambda m: None)


@pytest.mark.parametrize("name, arr, fragment", [
    ("s.npy", np.zeros((2, 1, 6), np.int64), "is an .npy file"),
    ("nan.npz", np.array([[[0.0, np.nan]]], np.float32), "1 NaN and 0 Inf"),
    ("inf.npz", np.array([[[0.0, 1.0]], [[-np.inf, 1.0]]]), "0 NaN and 1 Inf value(s) in 1 sample(s), the first at sample 1"),
    ("complex.npz", np.ones((2, 1, 6), np.complex128), "is complex (complex128"),
    ("text.npz", np.array([["a", "b"]]), "not numbers"),
    ("empty.npz", np.zeros((0, 1, 6), np.int64), "holds no sample (shape [0, 1, 6]"),
    ("zerodim.npz", np.zeros((2, 0, 6), np.int64), "has shape [2, 0, 6]: each sample is of size 0"),
])
def test_unusable_samples_are_refused_by_the_settings_before_a_run(settings_for, tmp_path, name, arr, fragment):
    """data.inputs is checked when the settings are validated (no run, no MLflow entry yet), and
    again wherever the samples are loaded."""
    from metainfer_core.normalize.inputs import load_samples

    path = tmp_path / name
    np.save(path, arr) if name.endswith(".npy") else np.savez(path, ids=arr)
    with pytest.raises(MetaInferError) as exc:
        settings_for("model=mlp", f"data.inputs={path}")
    assert str(exc.value).startswith(f"data.inputs={path}") and fragment in str(exc.value), str(exc.value)
    with pytest.raises(MetaInferError, match="data.inputs="):
        load_samples(str(path))
