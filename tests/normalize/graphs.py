"""Small hand-built graphs and the three checks every rewrite test makes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper, shape_inference

RTOL, ATOL = 1e-4, 1e-5
FLOAT = TensorProto.FLOAT


def value(name: str, shape: list | None, dtype: int = FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def const(name: str, array) -> onnx.TensorProto:  # type: ignore[no-untyped-def]
    return numpy_helper.from_array(np.asarray(array), name)


def weights(shape: list[int], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def bn_params(prefix: str, channels: int) -> list[onnx.TensorProto]:
    """Initializers {prefix}_scale/_shift/_mean/_var of an inference BatchNormalization."""
    rng = np.random.default_rng(5)
    return [
        const(f"{prefix}_scale", rng.uniform(0.5, 1.5, channels).astype(np.float32)),
        const(f"{prefix}_shift", rng.standard_normal(channels).astype(np.float32)),
        const(f"{prefix}_mean", rng.standard_normal(channels).astype(np.float32)),
        const(f"{prefix}_var", rng.uniform(0.5, 2.0, channels).astype(np.float32)),
    ]


def if_node(cond: str, reads: tuple[str, str], out: str, shape: list[int], name: str = "") -> onnx.NodeProto:
    """If(cond) whose then-branch returns Relu(reads[0]) and else-branch Neg(reads[1]), both read
    by outer-scope name."""
    then_branch = helper.make_graph(
        [helper.make_node("Relu", [reads[0]], ["then_out"])], "then", [], [value("then_out", shape)]
    )
    else_branch = helper.make_graph(
        [helper.make_node("Neg", [reads[1]], ["else_out"])], "else", [], [value("else_out", shape)]
    )
    return helper.make_node("If", [cond], [out], name=name, then_branch=then_branch, else_branch=else_branch)


def growing_loop(name: str = "") -> onnx.ModelProto:
    """Loop appending x to its carried tensor: ONNX inference cannot tell the output's rank."""
    body = helper.make_graph(
        [
            helper.make_node("Concat", ["acc", "x"], ["acc_out"], axis=0),
            helper.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        "body",
        [value("i", [], TensorProto.INT64), value("cond", [], TensorProto.BOOL), value("acc", None)],
        [value("cond_out", [], TensorProto.BOOL), value("acc_out", None)],
    )
    loop = helper.make_node("Loop", ["n", "", "x"], ["y"], name=name, body=body)
    return model([loop], [value("x", [2, 3]), value("n", [], TensorProto.INT64)], [value("y", None)])


def model(nodes, inputs, outputs, initializers=(), opset=17, domains=()) -> onnx.ModelProto:  # type: ignore[no-untyped-def]
    """A shape-inferred model; `domains`: extra (domain, version) opset imports."""
    graph = helper.make_graph(nodes, "test", inputs, outputs, list(initializers))
    opsets = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, v) for d, v in domains)]
    built = helper.make_model(graph, opset_imports=opsets)
    built.ir_version = 8
    return shape_inference.infer_shapes(built, strict_mode=True)


def op_types(m: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in m.graph.node]


def run(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def feeds_for(m: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    weight_names = {t.name for t in m.graph.initializer}
    feeds = {}
    for vi in m.graph.input:
        if vi.name in weight_names:
            continue
        dims = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        if dtype == np.bool_:
            feeds[vi.name] = np.asarray(rng.random(dims) < 0.5)
        else:
            feeds[vi.name] = rng.standard_normal(dims).astype(dtype)
    return feeds


def assert_rewrite(before: onnx.ModelProto, after: onnx.ModelProto, expected_ops: list[str]) -> None:
    """The three checks: resulting op types, same outputs under ONNX Runtime, full checker."""
    assert op_types(after) == expected_ops
    assert [o.name for o in after.graph.output] == [o.name for o in before.graph.output]
    feeds = feeds_for(before)
    for want, got in zip(run(before, feeds), run(after, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    onnx.checker.check_model(after, full_check=True)
