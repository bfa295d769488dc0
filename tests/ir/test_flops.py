"""Operation counts of the recurrent operators: every step's input and recurrent products, per
direction, plus the gates' element-wise work (a per-output-element count would read an LSTM of
300 hidden units as a few hundred operations)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from metainfer_core.ir.flops import node_flops
from metainfer_core.ir.tensors import tensor_infos


@pytest.mark.parametrize("op,gates,dirs", [("LSTM", 4, 1), ("GRU", 3, 2), ("RNN", 1, 1)])
def test_a_recurrent_operator_counts_its_products_over_the_sequence(op, gates, dirs):
    steps, batch, features, hidden = 12, 2, 59, 30
    w = numpy_helper.from_array(np.zeros((dirs, gates * hidden, features), np.float32), "W")
    r = numpy_helper.from_array(np.zeros((dirs, gates * hidden, hidden), np.float32), "R")
    node = helper.make_node(op, ["x", "W", "R"], ["y"], hidden_size=hidden,
                            direction="bidirectional" if dirs == 2 else "forward")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, batch, features])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [steps, dirs, batch, hidden])], [w, r])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    macs = steps * batch * dirs * gates * hidden * (features + hidden)
    flops = node_flops(node, tensor_infos(model))
    assert 2 * macs <= flops <= 2 * macs * 1.1, (flops, 2 * macs)
