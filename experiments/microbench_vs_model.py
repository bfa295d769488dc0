"""Micro-benchmark vs whole-model profile on `cpu`: the median of a Conv and of a
MatMul timed alone (the fingerprint library's micro-benchmark) against the same node's time
inside a whole-model run from ONNX Runtime's profiler, measured side by side in one run.

    python -m experiments.microbench_vs_model
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from app.compose import target_backend
from metainfer_core.fingerprint.profiler import kernel_model
from metainfer_core.ir.kernels import group_kernels
from metainfer_core.ir.tensors import random_feeds, tensor_infos
from metainfer_core.normalize import normalize


def model():
    """x[1,64,56,56] -> Conv3x3 -> Relu -> Conv3x3 -> GlobalAveragePool -> Flatten -> MatMul(64x4096)
    -> Relu -> MatMul(4096x4096): ops large enough that per-run overhead does not dominate."""
    rng = np.random.default_rng(0)
    w = lambda *s: numpy_helper.from_array((rng.standard_normal(s) * 0.05).astype(np.float32))  # noqa: E731
    inits = []
    for name, shape in (("W1", (64, 64, 3, 3)), ("W2", (64, 64, 3, 3)), ("M1", (64, 4096)), ("M2", (4096, 4096))):
        t = w(*shape)
        t.name = name
        inits.append(t)
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "W2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c2"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "M1"], ["h"], name="matmul1"),
             helper.make_node("Relu", ["h"], ["rh"], name="relu2"),
             helper.make_node("MatMul", ["rh", "M2"], ["y"], name="matmul2")]
    g = helper.make_graph(nodes, "bench", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 56, 56])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4096])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return normalize(m).model


def main() -> None:
    cpu = target_backend("cpu")
    m = model()
    infos = tensor_infos(m)
    whole = cpu.compile(m).node_times_us(random_feeds(m), runs=50)
    consumers = {i: n for n in m.graph.node for i in n.input}
    print("node       micro-bench ms   in-model ms   ratio")
    for k in group_kernels(m, infos):
        name, out = k.node_names[0], k.outputs[0]
        if k.op_type not in ("Conv", "MatMul"):
            continue
        # ONNX Runtime renames a Conv it moves to its blocked layout after the tensor it writes,
        # the Relu's when it fuses one: "<output>_nchwc"
        after = consumers.get(out)
        aliases = [f"{out}_nchwc", name] + ([f"{after.output[0]}_nchwc"] if after is not None else [])
        in_model_us = [whole[a] for a in aliases if a in whole]
        if not in_model_us:
            continue
        micro = cpu.benchmark(kernel_model(m, k, infos), reps=50, warmup=5).median_ms
        in_model = in_model_us[0] / 1e3
        print(f"{name:10s} {micro:14.4f} {in_model:13.4f} {micro / in_model:7.3f}")


if __name__ == "__main__":
    main()
