"""How long normalize() takes on a deep, exporter-style model (goal: under 10 s at ~1000 nodes).

    python -m experiments.normalize_speed [--blocks 85] [--profile]

The model is a chain of residual blocks, each spelled the way exporters leave it: Conv (no bias)
-> BatchNormalization -> Relu -> Conv -> BatchNormalization -> Add(skip) -> Relu, a scale held in
a Constant node and applied with Mul, an Identity, and in every fourth block a flatten/unflatten
round trip whose target shape is computed with Shape/Gather/Unsqueeze/Concat (folds only when the
shapes are static, as here). Prints the node counts before and after, the time, and the passes'
changes; --profile prints the 25 most expensive functions instead.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from metainfer_core.normalize import normalize

CHANNELS, SIZE = 16, 16
GOAL_S = 10.0


def build(blocks: int, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def weight(name: str, shape: list[int], scale: float) -> str:
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def conv_bn(prefix: str, x: str) -> str:
        w = weight(f"{prefix}_w", [CHANNELS, CHANNELS, 3, 3], (2.0 / (9 * CHANNELS)) ** 0.5)
        nodes.append(helper.make_node("Conv", [x, w], [f"{prefix}_c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]))
        inits.append(numpy_helper.from_array(rng.uniform(0.5, 1.0, CHANNELS).astype(np.float32), f"{prefix}_g"))
        params = [f"{prefix}_g", weight(f"{prefix}_b", [CHANNELS], 0.1), weight(f"{prefix}_m", [CHANNELS], 0.1)]
        inits.append(numpy_helper.from_array(rng.uniform(0.5, 1.5, CHANNELS).astype(np.float32), f"{prefix}_v"))
        nodes.append(helper.make_node("BatchNormalization", [f"{prefix}_c", *params, f"{prefix}_v"], [f"{prefix}_bn"]))
        return f"{prefix}_bn"

    x = "input"
    for i in range(blocks):
        p = f"b{i}"
        h = conv_bn(f"{p}a", x)
        nodes.append(helper.make_node("Relu", [h], [f"{p}_r1"]))
        h = conv_bn(f"{p}b", f"{p}_r1")
        nodes.append(helper.make_node("Add", [h, x], [f"{p}_sum"]))
        nodes.append(helper.make_node("Relu", [f"{p}_sum"], [f"{p}_r2"]))
        scale = numpy_helper.from_array(np.array(0.7, np.float32), f"{p}_k")
        nodes.append(helper.make_node("Constant", [], [f"{p}_scale"], value=scale))
        nodes.append(helper.make_node("Mul", [f"{p}_r2", f"{p}_scale"], [f"{p}_mul"]))
        nodes.append(helper.make_node("Identity", [f"{p}_mul"], [f"{p}_out"]))
        x = f"{p}_out"
        if i % 4 == 3:
            x = _flatten_round_trip(nodes, inits, p, x)
    graph = helper.make_graph(
        nodes,
        "deep_resnet",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, CHANNELS, SIZE, SIZE])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _flatten_round_trip(nodes: list, inits: list, p: str, x: str) -> str:
    """Reshape(x, [N, -1]) then back to Reshape(., Concat(N, C, H, W)), N read with Shape/Gather."""
    inits.append(numpy_helper.from_array(np.array(0, np.int64), f"{p}_zero"))
    inits.append(numpy_helper.from_array(np.array([-1], np.int64), f"{p}_minus1"))
    inits.append(numpy_helper.from_array(np.array([CHANNELS, SIZE, SIZE], np.int64), f"{p}_chw"))
    nodes += [
        helper.make_node("Shape", [x], [f"{p}_shape"]),
        helper.make_node("Gather", [f"{p}_shape", f"{p}_zero"], [f"{p}_n"], axis=0),
        helper.make_node("Unsqueeze", [f"{p}_n", "axes0"], [f"{p}_n1"]),
        helper.make_node("Concat", [f"{p}_n1", f"{p}_minus1"], [f"{p}_flat_shape"], axis=0),
        helper.make_node("Reshape", [x, f"{p}_flat_shape"], [f"{p}_flat"]),
        helper.make_node("Concat", [f"{p}_n1", f"{p}_chw"], [f"{p}_img_shape"], axis=0),
        helper.make_node("Reshape", [f"{p}_flat", f"{p}_img_shape"], [f"{p}_img"]),
    ]
    if not any(t.name == "axes0" for t in inits):
        inits.append(numpy_helper.from_array(np.array([0], np.int64), "axes0"))
    return f"{p}_img"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=85, help="residual blocks (~10 nodes each)")
    parser.add_argument("--profile", action="store_true", help="print the hottest functions")
    args = parser.parse_args()
    model = build(args.blocks)
    profiler = cProfile.Profile() if args.profile else None
    start = time.perf_counter()
    if profiler:
        profiler.enable()
    result = normalize(model)
    if profiler:
        profiler.disable()
    seconds = time.perf_counter() - start
    changes: dict[str, int] = {}
    for entry in result.log:
        changes[entry["pass"]] = changes.get(entry["pass"], 0) + entry["changes"]
    rounds = max(e["round"] for e in result.log)
    print(f"model: {args.blocks} residual blocks, {result.nodes_before} nodes, {len(model.graph.initializer)} weights")
    print(f"normalize: {result.nodes_before} -> {result.nodes_after} nodes in {seconds:.2f} s ({rounds} rounds; "
          f"goal < {GOAL_S:.0f} s: {'met' if seconds < GOAL_S else 'MISSED'})")
    print("changes per pass: " + ", ".join(f"{k} {v}" for k, v in changes.items()))
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    return 0 if seconds < GOAL_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
