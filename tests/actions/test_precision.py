"""Low-precision substitution: fp16, bf16 (emulated) and int8 (QDQ). Lossy: each test reports
the accuracy effect (1 - cosine similarity to the fp32 outputs) and bounds it."""
from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.actions.qdq.params import channel_axis
from metainfer_core.ir.directives import PRECISION_KEY, node_meta
from metainfer_core.ir.kernels import group_kernels
from metainfer_core.normalize import normalize
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.zoo import build

from action_checks import apply, loss, ops
from twins import backend

INT8 = {"scope": "compute", "activation_type": "QUInt8", "weight_type": "QInt8", "per_channel": True,
        "calibrate_method": "MinMax"}


def test_fp16_converts_and_stays_close():
    m = build("mobilenet_v2_tiny")
    out, feeds = apply("fp16", m, {"scope": "all"})
    assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in out.graph.initializer)
    assert ops(out)["Cast"] >= 2
    assert loss(m, out, feeds) < 1e-5


def test_bf16_is_emulated_with_marked_casts_and_forms_bf16_kernels():
    m = normalize(build("resnet_tiny"), None).model
    out, feeds = apply("bf16", m, {"scope": "all"})
    casts = [n for n in out.graph.node if n.op_type == "Cast"]
    assert casts and all(node_meta(n, PRECISION_KEY) == "bfloat16" for n in casts)
    assert any(i.data_type == onnx.TensorProto.BFLOAT16 for i in out.graph.initializer)
    kinds = {(k.op_type, k.dtype) for k in group_kernels(out)}
    assert ("Conv", "bfloat16") in kinds and len(group_kernels(out)) <= len(group_kernels(m)) + 2
    effect = loss(m, out, feeds)
    assert 1e-7 < effect < 1e-3          # 8 mantissa bits: coarser than fp16, far finer than int8


def test_bf16_only_where_the_device_computes_it():
    m = build("mlp")
    for target in ("npu", "fpga", "asic"):
        info = backend(target).info
        site = ACTIONS["bf16"].sites(m, {"scope": "all"}, info)[0]
        assert "bfloat16 datapath" in ACTIONS["bf16"].legal(m, site, {"scope": "all"}, info)


@pytest.mark.parametrize("params", [INT8, dict(INT8, scope="all", activation_type="QInt8"),
                                    dict(INT8, per_channel=False, weight_type="QUInt8", calibrate_method="Percentile"),
                                    dict(INT8, calibrate_method="Entropy")])
def test_int8_quantizes_in_qdq_and_stays_close(params):
    m = normalize(build("resnet_tiny"), None).model
    out, feeds = apply("int8", m, params, target="npu")
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= set(ops(out))
    assert ("Conv", "int8") in {(k.op_type, k.dtype) for k in group_kernels(out)}
    assert loss(m, out, feeds) < 0.01


def _weight_scales(model: onnx.ModelProto) -> dict[str, int]:
    """Weight (int8 initializer) -> how many scales its DequantizeLinear has."""
    inits = {i.name: i for i in model.graph.initializer}
    return {n.input[0]: int(np.prod(inits[n.input[1]].dims)) for n in model.graph.node
            if n.op_type == "DequantizeLinear" and n.input[0] in inits and n.input[0].endswith("|int8")}


def test_int8_auto_keeps_per_channel_scales_only_where_channels_differ():
    m = normalize(build("mlp"), None).model
    inits = {i.name: i for i in m.graph.initializer}
    gemms = [n for n in m.graph.node if n.op_type == "Gemm"]
    loud = inits[gemms[0].input[1]]
    w = numpy_helper.to_array(loud).copy()
    axis = channel_axis(gemms[0])
    index = [slice(None)] * w.ndim
    index[axis] = 0
    w[tuple(index)] *= 20.0                   # one output channel 20x the others: per tensor would crush them
    loud.CopyFrom(numpy_helper.from_array(w, loud.name))
    out, feeds = apply("int8", m, dict(INT8, scope="all", per_channel="auto"), target="npu")
    scales = _weight_scales(out)
    assert scales[f"{loud.name}|int8"] == w.shape[axis]
    quiet = [n.input[1] for n in gemms[1:]]
    assert quiet and all(scales[f"{q}|int8"] == 1 for q in quiet)
    # the loud weight's quiet channels would lose ~20x resolution under one scale
    per_tensor, _ = apply("int8", m, dict(INT8, scope="all", per_channel=False), target="npu", feeds=feeds)
    assert loss(m, out, feeds) < 0.01
    assert loss(m, out, feeds) < loss(m, per_tensor, feeds)


def test_int8_auto_quantizes_old_opsets_per_tensor():
    m = normalize(build("mlp"), None).model
    m.opset_import[0].version = 11            # no per-channel DequantizeLinear before opset 13
    site = ACTIONS["int8"].sites(m, INT8, backend("npu").info)[0]
    assert "opset >= 13" in ACTIONS["int8"].legal(m, site, INT8, backend("npu").info)
    assert ACTIONS["int8"].legal(m, site, dict(INT8, per_channel="auto"), backend("npu").info) is None


def test_int8_scope_all_folds_relu_into_the_conv_output_range():
    m = normalize(build("resnet_tiny"), None).model
    out, feeds = apply("int8", m, dict(INT8, scope="all"), target="npu")
    assert ops(out)["Relu"] < ops(m)["Relu"]
    # every quantized reader has its own DequantizeLinear: only int8 tensors live between kernels
    ks = group_kernels(out)
    assert sum(k.dtype == "int8" for k in ks) > 0.9 * len(ks)


@pytest.mark.alone
def test_int8_rewrite_is_linear_in_graph_size():
    from bench.search_scaling import residual_cnn

    m = normalize(residual_cnn(600), {"input": [1, 16, 16, 16]}).model
    feeds = [random_feeds(m, seed=0)]
    ctx = ActionContext(target=backend("npu").info, calibration_feeds=feeds)
    site = ACTIONS["int8"].sites(m, INT8, ctx.target)[0]
    ACTIONS["int8"].apply(m, site, INT8, ctx)                    # calibrates once for the run
    t0 = time.perf_counter()
    ACTIONS["int8"].apply(m, site, dict(INT8, activation_type="QInt8"), ctx)
    assert time.perf_counter() - t0 < 2.0                        # ONNX Runtime's quantize_static: ~6 s here


def test_lossy_actions_do_not_stack():
    m = build("mlp")
    half, _ = apply("fp16", m, {"scope": "all"})
    assert not ACTIONS["int8"].sites(half, INT8, backend("npu").info)
    q, _ = apply("int8", m, INT8, target="npu")
    assert not ACTIONS["fp16"].sites(q, {"scope": "all"}, backend("gpu").info)
    assert not ACTIONS["bf16"].sites(q, {"scope": "all"}, backend("gpu").info)


def test_datapath_legality():
    m = build("mlp")
    site = ACTIONS["fp16"].sites(m, {"scope": "all"}, backend("asic").info)[0]
    assert "float16" in ACTIONS["fp16"].legal(m, site, {"scope": "all"}, backend("asic").info)
    site = ACTIONS["int8"].sites(m, INT8, backend("gpu").info)[0]
    assert "QDQ" in ACTIONS["int8"].legal(m, site, INT8, backend("gpu").info)


def test_int8_bias_of_a_dead_weight_channel_fits_int32():
    """A conv channel with near-zero weights and a real bias (as in PP-OCR's detector): bias /
    (input scale x weight scale) would overflow int32 and wrap; the channel's weight scale is
    raised until the bias fits (its weights quantize to zero: an error of 1e-12)."""
    import numpy as np
    from onnx import numpy_helper

    from graphs import conv_chain

    m = conv_chain(cin=4, cout=8, size=8)
    w = {i.name: i for i in m.graph.initializer}
    weights = numpy_helper.to_array(w["W"]).copy()
    weights[3] = 1e-12                                           # one dead channel
    w["W"].CopyFrom(numpy_helper.from_array(weights, "W"))
    w["B"].CopyFrom(numpy_helper.from_array(np.full(8, 2.0, np.float32), "B"))
    out, feeds = apply("int8", m, INT8, target="npu")
    conv = next(n for n in out.graph.node if n.op_type == "Conv")
    assert conv.input[2] != "B"                                  # an int32 bias
    assert loss(m, out, feeds) < 0.01


def _matmul_rank3(rows: int = 5) -> onnx.ModelProto:
    """x [2, rows, 16] @ W [2, 16, 8] (a batched weight, as jax2tf writes einsums): MatMul B
    of rank 3, its output channels on the last axis."""
    from onnx import TensorProto, helper

    w = np.random.default_rng(0).standard_normal((2, 16, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "mm3",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, rows, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, rows, 8])], [numpy_helper.from_array(w, "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("per_channel", [True, "auto", False])
@pytest.mark.parametrize("scope", ["compute", "all"])
def test_int8_matmul_with_a_rank3_weight_runs_in_onnxruntime(per_channel, scope):
    """ONNX Runtime fuses DQ -> MatMul into integer kernels that take one B scale for a batched
    weight (per axis: "b zero point is not valid" / "scale must be 1D tensor with size 1"): the
    rank-3 weight is quantized per tensor, and the plan runs (run_cpu: ORT with its QDQ fusions)."""
    m = _matmul_rank3()
    out, feeds = apply("int8", m, dict(INT8, scope=scope, per_channel=per_channel), target="npu")
    dq = next(n for n in out.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == "W|int8")
    assert not any(a.name == "axis" for a in dq.attribute)
    assert _weight_scales(out)["W|int8"] == 1
    assert loss(m, out, feeds) < 1e-2


def test_int8_per_axis_dequantize_of_a_rank3_matmul_weight_is_what_onnxruntime_rejects():
    """Why per tensor: the per-axis form (scales on N, the semantic channel axis) of the same
    weight fails inside ONNX Runtime once the MatMul's output is read in float."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from metainfer_core.ir.tensors import quiet_session_options

    w = np.random.default_rng(0).standard_normal((2, 16, 8)).astype(np.float32)
    scale = (np.abs(w).max(axis=(0, 1)) / 127).astype(np.float32)
    q = np.round(w / scale).astype(np.int8)
    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["Wq", "s", "z"], ["W"], axis=2),
         helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
         helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
         helper.make_node("MatMul", ["xd", "W"], ["y"])], "peraxis",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 8])],
        [numpy_helper.from_array(q, "Wq"), numpy_helper.from_array(scale, "s"),
         numpy_helper.from_array(np.zeros(8, np.int8), "z"), numpy_helper.from_array(np.array(0.02, np.float32), "xs"),
         numpy_helper.from_array(np.array(128, np.uint8), "xz")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(), quiet_session_options(),
                                   providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="zero point|scale"):
        session.run(None, {"x": np.ones((2, 5, 16), np.float32)})


def test_weight_axis_follows_each_consumers_semantics():
    from onnx import helper

    from metainfer_core.actions.qdq.params import weight_axis

    def node(op, **attrs):
        return helper.make_node(op, ["x", "w"], ["y"], name=op.lower(), **attrs)

    rng = np.random.default_rng(0)
    w4 = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((16, 8)).astype(np.float32)
    cases = [(node("Conv"), w4, 0), (node("ConvTranspose"), w4, 1), (node("Gemm"), w2, 1),
             (node("Gemm", transB=1), w2, 0), (node("MatMul"), w2, 1)]
    for n, w, axis in cases:
        assert channel_axis(n, w.ndim) == axis, n.op_type
        assert weight_axis(n, w, True, 17) == axis, n.op_type
        assert weight_axis(n, w, False, 17) is None
    w3 = rng.standard_normal((2, 16, 8)).astype(np.float32)
    assert channel_axis(node("MatMul"), 3) == 2                 # N, the last axis of [..., K, N]
    assert weight_axis(node("MatMul"), w3, True, 17) is None     # but ORT runs it per tensor only
    assert weight_axis(node("MatMul"), w3, "auto", 17) is None


def test_minmax_calibration_reduces_each_input_to_the_ranges_of_all_inputs_at_once():
    """MinMax calibration holds one input's intermediates at a time: its ranges must equal those of
    every input's values taken together (ONNX Runtime, each activation exposed, reduced here)."""
    import onnxruntime as ort

    from metainfer_core.actions.qdq.calibration import calibrate
    from metainfer_core.ir.graph_utils import with_outputs

    m = normalize(build("resnet_tiny"), None).model
    feeds = [random_feeds(m, seed=s) for s in range(3)]
    ranges = calibrate(m, feeds, "MinMax")
    names = [n for n in ranges if n not in {i.name for i in m.graph.input}]
    sess = ort.InferenceSession(with_outputs(m, {n: onnx.TensorProto.FLOAT for n in names}).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    runs = [sess.run(names, f) for f in feeds]
    assert len(names) > 10
    for j, n in enumerate(names):
        values = np.concatenate([r[j].ravel() for r in runs])
        assert ranges[n] == pytest.approx((min(float(values.min()), 0.0), max(float(values.max()), 0.0)), rel=1e-6, abs=1e-7)
