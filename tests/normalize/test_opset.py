import numpy as np
import onnx
import onnx.numpy_helper
import pytest
from onnx import helper

from metainfer_core.errors import MetaInferError
from metainfer_core.normalize import normalize
from metainfer_core.normalize.opset import CANONICAL_OPSET, default_opset, to_canonical_opset

from .graphs import model, op_types, run, value


def test_opset_11_model_is_upgraded_to_17():
    before = model(
        [helper.make_node("Squeeze", ["x"], ["s"], axes=[0]), helper.make_node("Unsqueeze", ["s"], ["y"], axes=[1])],
        [value("x", [1, 3])],
        [value("y", [3, 1])],
        opset=11,
    )
    after, version = to_canonical_opset(before)
    assert (version, default_opset(after)) == (11, CANONICAL_OPSET)
    assert [n for n in op_types(after) if n != "Constant"] == ["Squeeze", "Unsqueeze"]
    x = {"x": np.arange(3, dtype=np.float32).reshape(1, 3)}
    np.testing.assert_allclose(run(after, x)[0], run(before, x)[0], rtol=1e-4, atol=1e-5)


def test_newer_opset_is_kept():
    before = model([helper.make_node("Relu", ["x"], ["y"])], [value("x", [2])], [value("y", [2])], opset=18)
    after, version = to_canonical_opset(before)
    assert version == 18 and after is before


def test_unknown_custom_domain_names_node_op_and_domain():
    frob = helper.make_node("Frobnicate", ["x"], ["y"], name="frob1", domain="acme.ops")
    before = model([frob], [value("x", [2])], [value("y", [2])], domains=[("acme.ops", 1)])
    with pytest.raises(MetaInferError, match=r"'frob1'.*'Frobnicate'.*'acme\.ops'"):
        to_canonical_opset(before)


def test_microsoft_domain_is_allowed():
    gelu = helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft")
    before = model([gelu], [value("x", [2])], [value("y", [2])], domains=[("com.microsoft", 1)])
    assert to_canonical_opset(before)[1] == 17


def test_unconvertible_node_is_named():
    before = model([helper.make_node("Relu", ["x"], ["y"])], [value("x", [2])], [value("y", [2])], opset=11)
    before.graph.node.append(helper.make_node("NotAnOp", ["y"], ["z"], name="bad"))
    with pytest.raises(MetaInferError, match=r"Node 'bad' \(op NotAnOp\) cannot be converted from opset 11"):
        to_canonical_opset(before)


@pytest.mark.parametrize("case", ["test_Linear", "test_PReLU_2d_multiparam", "test_PReLU_3d_multiparam",
                                  "test_BatchNorm2d_eval", "test_AvgPool2d"])
def test_opset_6_models_match_their_exporters_outputs(case):
    """ONNX Runtime has no opset-6 kernels, so the equivalence check compares with ONNX's conversion
    to the canonical opset; these PyTorch exports (onnx's own backend test data, with PyTorch's
    outputs) check the conversion itself, legacy per-channel PRelu slopes included."""
    import glob
    import os

    folder = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/pytorch-converted", case)
    original = onnx.load(os.path.join(folder, "model.onnx"))
    assert default_opset(original) == 6
    result = normalize(original)
    assert result.opset_to == CANONICAL_OPSET
    assert any(e["pass"] == "equivalence_reference" for e in result.log)
    onnx.checker.check_model(result.model, full_check=True)
    data = os.path.join(folder, "test_data_set_0")
    x = onnx.numpy_helper.to_array(onnx.load_tensor(sorted(glob.glob(os.path.join(data, "input_*.pb")))[0]))
    want = onnx.numpy_helper.to_array(onnx.load_tensor(os.path.join(data, "output_0.pb")))
    feeds = {result.model.graph.input[0].name: x}
    (got,) = run(result.model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
