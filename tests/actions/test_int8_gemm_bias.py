"""int8 in ONNX Runtime's QDQ form quantizes a bias to int32 per output channel: a Gemm whose C
is 2-D (1 x N, broadcast, as tf2onnx / jax2tf write dense layers) keeps it in float, or the
graph would not run (a per-axis DequantizeLinear takes 1-D scales)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from action_checks import apply, loss


def _dense(c_shape: tuple[int, ...]) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.2, (16, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(0, 0.1, c_shape).astype(np.float32), "c")]
    g = helper.make_graph([helper.make_node("Gemm", ["x", "w", "c"], ["y"], name="dense")], "dense",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("c_shape, int32_bias", [((8,), True), ((1, 8), False)])
@pytest.mark.parametrize("activation_type", ["QInt8", "QUInt8"])
def test_a_dense_layers_bias_is_int32_only_when_it_is_per_channel(c_shape, int32_bias, activation_type):
    m = _dense(c_shape)
    params = {"scope": "compute", "activation_type": activation_type, "weight_type": "QInt8", "per_channel": False,
              "calibrate_method": "MinMax", "placement": "inputs_outputs"}
    out, feeds = apply("int8", m, params, target="cpu")
    gemm = next(n for n in out.graph.node if n.op_type == "Gemm")
    producer = {o: n for n in out.graph.node for o in n.output}
    bias_dq = producer.get(gemm.input[2])
    assert (bias_dq is not None and bias_dq.op_type == "DequantizeLinear") == int32_bias
    assert loss(m, out, feeds) < 0.05          # runs on ONNX Runtime (a 2-D C failed there), near fp32
