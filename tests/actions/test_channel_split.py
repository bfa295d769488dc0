"""Output-channel split (tiling axis=channels): a layer's weights in blocks of output channels,
the blocks joined by a Concat; what a device streaming weights from flash needs to hold one
block at a time."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from metainfer_core.actions import ACTIONS
from metainfer_core.ir.kernels import group_kernels
from metainfer_core.ir.memory import plan_memory
from metainfer_core.normalize import normalize
from metainfer_core.ir.tensors import tensor_infos
from metainfer_core.zoo import build

from action_checks import apply, ops, same_numerics
from twins import backend
from graphs import conv_chain, matmul, model_of

CH = {"tiles": 4, "axis": "channels"}
INT8 = {"scope": "all", "activation_type": "QUInt8", "weight_type": "QInt8", "per_channel": True,
        "calibrate_method": "MinMax"}


def streamed_weights(model) -> int:
    """The npu's weight buffer: the heaviest kernel's weights."""
    infos = tensor_infos(model)
    ks = group_kernels(model, infos)
    return plan_memory(ks, infos, ["x"], streamed_weights=True).weights_bytes


def test_a_conv_split_by_output_channels_computes_the_same_outputs():
    m = conv_chain(cin=8, cout=32, size=8)
    out, feeds = apply("tiling", m, CH, target="npu")
    assert ops(out)["Conv"] == 4 and ops(out)["Concat"] == 1
    same_numerics(m, out, feeds, rtol=1e-6, atol=1e-6)      # each channel's sum is untouched
    assert streamed_weights(out) * 4 <= streamed_weights(m) + 4 * 32 * 4     # a quarter, bias aside


def test_matmul_and_gemm_split_along_their_output_columns():
    m = matmul(m=8, k=64, n=32)
    out, feeds = apply("tiling", m, CH, target="npu")
    assert ops(out)["MatMul"] == 4
    same_numerics(m, out, feeds, rtol=1e-6, atol=1e-6)
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((32, 64)) * 0.1).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "B")
    gemm = model_of([helper.make_node("Gemm", ["x", "W", "B"], ["y"], name="fc", transB=1, alpha=0.5)],
                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])], [w, b])
    out, feeds = apply("tiling", gemm, CH, target="npu")
    assert ops(out)["Gemm"] == 4
    same_numerics(gemm, out, feeds, rtol=1e-6, atol=1e-6)


def test_on_a_quantized_graph_each_block_stays_one_integer_kernel():
    """resnet_tiny's heavy convs (the two 3x3 128x128 ones hold 147 KB each in int8): their blocks and the Concat of
    their quantized outputs all run on the npu's integer units, and the outputs agree."""
    m = normalize(build("resnet_tiny"), None).model
    q, feeds = apply("int8", m, INT8, target="npu")
    out, _ = apply("tiling", q, CH, target="npu", feeds=feeds, site=1)       # every heavy layer
    npu = backend("npu")
    before = npu.device.placement(group_kernels(q)).count(False)
    kernels = group_kernels(out)
    assert npu.device.placement(kernels).count(False) == before
    blocks = [k for k in kernels if any("|ch" in n.name for n in k.nodes) and k.op_type.startswith("Conv")]
    assert len(blocks) >= 8 and all(k.dtype == "int8" for k in blocks)
    same_numerics(q, out, feeds, rtol=0, atol=1e-5)        # same scale, same integer sums
    assert npu.compile(out).peak_bytes < npu.compile(q).peak_bytes


def test_offered_only_where_weights_stream():
    m = conv_chain(cin=8, cout=32, size=8)
    assert ACTIONS["tiling"].sites(m, CH, backend("npu").info)
    assert not ACTIONS["tiling"].sites(m, CH, backend("gpu").info)       # resident weights: launches only


def test_depthwise_convs_are_not_split():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 1, 3, 3)).astype(np.float32), "W")
    dw = model_of([helper.make_node("Conv", ["x", "W"], ["y"], name="dw", group=16, pads=[1, 1, 1, 1])],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])], [w])
    assert not ACTIONS["tiling"].sites(dw, CH, backend("npu").info)
