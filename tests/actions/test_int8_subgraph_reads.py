"""int8 where an If branch reads a quantizable op's output from the outer graph (silero_vad's
decoder does): that op stays float, so the graph stays valid (no fold renames the tensor) and
ONNX Runtime's QDQ fusion, which aborts the process on a DequantizeLinear read inside a branch,
never sees one."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from metainfer_core.accuracy.metric import plan_loss, run_cpu
from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.ir.tensors import random_feeds

from graphs import model_of

INT8_ALL = dict(ACTIONS["int8"].with_defaults({}), scope="all")


def branch_reading(name: str, tensor: str, op: str) -> onnx.GraphProto:
    return helper.make_graph([helper.make_node(op, [tensor], [f"{name}_y"], name=f"{name}_op")], name, [],
                             [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)])


def conv_relu_into_if() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32) * 0.3, "W")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "B")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 8, 1, 1)).astype(np.float32) * 0.3, "W2")
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),            # read inside both branches
             helper.make_node("Conv", ["r", "W2"], ["c2"], name="conv2"),
             helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["flag"], name="flag"),
             helper.make_node("If", ["flag"], ["branch"], name="if", then_branch=branch_reading("then", "r", "Sigmoid"),
                              else_branch=branch_reading("else", "r", "Neg")),
             helper.make_node("Add", ["branch", "c2"], ["y"], name="add")]
    zero = numpy_helper.from_array(np.zeros((), np.float32), "zero")
    return model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], [w, b, w2, zero])


def test_an_op_whose_output_a_branch_reads_stays_float_and_the_graph_runs_optimized():
    m = conv_relu_into_if()
    feeds = [random_feeds(m, seed=i) for i in range(3)]
    site = ACTIONS["int8"].sites(m, INT8_ALL, None)[0]
    assert "relu" in site.nodes
    q = ACTIONS["int8"].apply(m, site, INT8_ALL, ActionContext(calibration_feeds=feeds))
    onnx.checker.check_model(q, full_check=True)
    producer = {o: n for n in q.graph.node for o in n.output}
    assert producer["r"].op_type == "Relu"                # not folded into the Conv's quantized output
    assert any(n.op_type == "QuantizeLinear" for n in q.graph.node)       # the rest is quantized
    # run_cpu disables ONNX Runtime's optimizations; the plan runs with all of them on the target
    import onnxruntime as ort
    sess = ort.InferenceSession(q.SerializeToString(), providers=["CPUExecutionProvider"])
    optimized = [sess.run(None, f) for f in feeds]
    assert plan_loss(run_cpu(m, feeds), optimized) < 1e-3
    assert plan_loss(run_cpu(q, feeds), optimized) < 1e-5
