import numpy as np
import onnx
import pytest
from onnx import helper

from metainfer_core.errors import MetaInferError
from metainfer_core.normalize import CANONICAL_OPSET, normalize
from metainfer_core.normalize import pipeline as pipeline_module
from metainfer_core.ir.graph_utils import tensor_shapes

from .graphs import bn_params, const, growing_loop, if_node, model, op_types, value, weights


def _exported_cnn(batch="N") -> onnx.ModelProto:
    """Conv-BN-Relu with the clutter exporters leave: Identity, a bias Add, a transpose round trip,
    shape arithmetic, a duplicated branch, MatMul + Add and Dropout."""
    nodes = [
        helper.make_node("Identity", ["x"], ["x_id"]),
        helper.make_node("Conv", ["x_id", "W", "B"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "bn_scale", "bn_shift", "bn_mean", "bn_var"], ["bn"]),
        helper.make_node("Add", ["bn", "chan_bias"], ["biased"]),
        helper.make_node("Relu", ["biased"], ["r1"]),
        helper.make_node("Relu", ["biased"], ["r2"]),
        helper.make_node("Add", ["r1", "r2"], ["twice"]),
        helper.make_node("Transpose", ["twice"], ["nhwc"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["nhwc"], ["nchw"], perm=[0, 3, 1, 2]),
        helper.make_node("Constant", [], ["flat_shape"], value=const("v", np.array([-1, 4 * 6 * 6], np.int64))),
        helper.make_node("Reshape", ["nchw", "flat_shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "fc_W"], ["fc"]),
        helper.make_node("Add", ["fc", "fc_b"], ["logits"]),
        helper.make_node("Dropout", ["logits"], ["y"]),
    ]
    inits = [
        const("W", weights([4, 3, 3, 3])),
        const("B", weights([4], 1)),
        *bn_params("bn", 4),
        const("chan_bias", weights([4, 1, 1], 2)),
        const("fc_W", weights([4 * 6 * 6, 10], 3)),
        const("fc_b", weights([10], 4)),
    ]
    return model(nodes, [value("x", [batch, 3, 6, 6])], [value("y", None)], inits)


def test_exported_cnn_collapses_to_canonical_form_and_stays_equivalent():
    result = normalize(_exported_cnn())
    assert op_types(result.model) == ["Conv", "Relu", "Add", "Reshape", "Gemm"]
    assert (result.nodes_before, result.nodes_after) == (14, 5)
    assert (result.opset_from, result.opset_to) == (17, CANONICAL_OPSET)
    assert result.symbolic_dims == {"x": ["N", 3, 6, 6]}
    assert set(result.max_abs_err) == {"y"} and result.max_abs_err["y"] < 1e-4
    onnx.checker.check_model(result.model, full_check=True)


def test_fixed_point_log_ends_with_a_quiet_round():
    result = normalize(_exported_cnn(), input_shapes={"x": [2, 3, 6, 6]})
    rounds = sorted({entry["round"] for entry in result.log})
    last = [e for e in result.log if e["round"] == rounds[-1]]
    assert len(rounds) >= 2 and all(e["changes"] == 0 for e in last)
    assert [e["pass"] for e in last] == [name for name, _ in pipeline_module.NORMALIZE_PASSES]
    assert any(e["pass"] == "fold_conv_bn" and e["changes"] == 1 for e in result.log)
    assert result.symbolic_dims == {"x": [2, 3, 6, 6]}


def test_conv_bn_relu_chain_loses_the_bn():
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[1, 1]),
        helper.make_node("BatchNormalization", ["c", "bn_scale", "bn_shift", "bn_mean", "bn_var"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["y"]),
    ]
    before = model(nodes, [value("x", [1, 3, 4, 4])], [value("y", None)], [const("W", weights([4, 3, 1, 1])), *bn_params("bn", 4)])
    result = normalize(before)
    assert op_types(result.model) == ["Conv", "Relu"] and result.nodes_after < result.nodes_before


def test_if_body_reading_an_identity_output_by_outer_name():
    before = model(
        [
            helper.make_node("Identity", ["x"], ["t"]),
            helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
            helper.make_node("Greater", ["s", "zero"], ["c"]),
            if_node("c", ("t", "t"), "y", [2, 3]),
        ],
        [value("x", [2, 3])],
        [value("y", [2, 3])],
        [const("zero", np.array(0, np.float32))],
    )
    result = normalize(before)
    assert op_types(result.model) == ["ReduceSum", "Greater", "If"]
    assert result.max_abs_err["y"] == 0.0


def test_constant_nodes_instead_of_initializers():
    nodes = [
        helper.make_node("Constant", [], ["w"], value=const("w", weights([3, 3]))),
        helper.make_node("Constant", [], ["two"], value_float=2.0),
        helper.make_node("Mul", ["w", "two"], ["w2"]),
        helper.make_node("MatMul", ["x", "w2"], ["y"]),
    ]
    result = normalize(model(nodes, [value("x", [2, 3])], [value("y", None)]))
    assert op_types(result.model) == ["MatMul"]
    assert [t.name for t in result.model.graph.initializer] == ["w2"]


def test_opset_11_model_comes_out_at_17():
    nodes = [helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0]), helper.make_node("Squeeze", ["u"], ["y"], axes=[0])]
    result = normalize(model(nodes, [value("x", [2, 3])], [value("y", None)], opset=11))
    assert (result.opset_from, result.opset_to) == (11, 17)
    assert result.max_abs_err == {"y": 0.0}


def test_old_exporter_style_weights_as_inputs_still_fold():
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[3, 3]),
        helper.make_node("BatchNormalization", ["c", "bn_scale", "bn_shift", "bn_mean", "bn_var"], ["bn"]),
        helper.make_node("Dropout", ["bn"], ["d"], ratio=0.3),
        helper.make_node("Relu", ["d"], ["y"]),
    ]
    inits = [const("W", weights([4, 3, 3, 3])), *bn_params("bn", 4)]
    weight_inputs = [value(t.name, list(t.dims)) for t in inits]
    before = model(nodes, [value("x", ["N", 3, 8, 8]), *weight_inputs], [value("y", None)], inits, opset=11)
    before.ir_version = 6
    result = normalize(before)
    assert op_types(result.model) == ["Conv", "Relu"]
    assert [i.name for i in result.model.graph.input] == ["x"]
    assert result.model.ir_version == 8
    onnx.checker.check_model(result.model, full_check=True)


def test_custom_domain_op_is_refused():
    frob = helper.make_node("Frobnicate", ["x"], ["y"], name="frob1", domain="acme.ops")
    before = model([frob], [value("x", [2])], [value("y", [2])], domains=[("acme.ops", 1)])
    with pytest.raises(MetaInferError, match="frob1"):
        normalize(before)


def test_data_dependent_loop_output_keeps_its_rank_but_not_the_size_runs_disagree_on():
    # the trip count is an input: runs on different random inputs grow the output differently
    result = normalize(growing_loop("grow"))
    assert tensor_shapes(result.model.graph)["y"] == [None, 3]


def test_unknown_rank_output_is_refused_by_name():
    grow = growing_loop("grow")
    grow.graph.node[0].attribute[0].g.node[0].op_type = "NoSuchOp"     # not even the runtime can run it
    with pytest.raises(MetaInferError, match=r"Tensor 'y' \(output 0 of node 'grow' \(Loop\)\)"):
        normalize(grow)


def test_a_rewrite_that_changes_results_is_caught(monkeypatch):
    def relu_to_sigmoid(m):
        m = onnx.ModelProto.FromString(m.SerializeToString())
        changed = 0
        for node in m.graph.node:
            if node.op_type == "Relu":
                node.op_type, changed = "Sigmoid", changed + 1
        return m, changed

    monkeypatch.setattr(pipeline_module, "NORMALIZE_PASSES", [("broken", relu_to_sigmoid)])
    before = model([helper.make_node("Relu", ["x"], ["y"])], [value("x", [4])], [value("y", [4])])
    with pytest.raises(MetaInferError, match=r"output 'y' differs .*max abs error"):
        normalize(before)
