"""Subgraph splitting: a chain run on row (or batch) tiles with halos, joined by a Concat."""
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
from graphs import model_of

TILES = {"tiles": 4, "axis": "height"}


def arena(model):
    infos = tensor_infos(model)
    return plan_memory(group_kernels(model, infos), infos, ["input"] if "input" in infos else ["x"], "greedy",
                       {o.name for o in model.graph.output}).arena_bytes


def windows_chain(batch: int = 1):
    """Conv 5x5 (pad 2) -> Relu -> MaxPool 3x3/s2 (pad 1) -> Conv 3x3 dilation 2 (pad 2) -> Clip -> AveragePool 2x2/s2"""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.2).astype(np.float32), n) for n, s in
             (("W1", (8, 4, 5, 5)), ("B1", (8,)), ("W2", (8, 8, 3, 3)), ("lo", ()), ("hi", ()))]
    inits[3] = numpy_helper.from_array(np.array(0.0, np.float32), "lo")
    inits[4] = numpy_helper.from_array(np.array(2.0, np.float32), "hi")
    nodes = [helper.make_node("Conv", ["x", "W1", "B1"], ["a"], name="c1", pads=[2, 2, 2, 2]),
             helper.make_node("Relu", ["a"], ["b"], name="r1"),
             helper.make_node("MaxPool", ["b"], ["c"], name="p1", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c", "W2"], ["d"], name="c2", pads=[2, 2, 2, 2], dilations=[2, 2]),
             helper.make_node("Clip", ["d", "lo", "hi"], ["e"], name="k"),
             helper.make_node("AveragePool", ["e"], ["y"], name="p2", kernel_shape=[2, 2], strides=[2, 2])]
    return model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4, 32, 32])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8, 8, 8])], inits)


def test_row_tiles_with_halos_compute_exactly_the_same_rows():
    m = windows_chain()
    for tiles in (2, 4):                        # the output has 8 rows: 2 rows a tile at least
        out, feeds = apply("tiling", m, {"tiles": tiles, "axis": "height"}, target="npu")
        assert ops(out)["Slice"] == tiles and ops(out)["Concat"] == 1 and ops(out)["Conv"] == 2 * tiles
        same_numerics(m, out, feeds)


def test_batch_tiles():
    m = windows_chain(batch=4)
    out, feeds = apply("tiling", m, {"tiles": 2, "axis": "batch"}, target="npu")
    assert ops(out)["Slice"] == 2
    same_numerics(m, out, feeds)


def test_tiling_cuts_the_planned_peak_of_a_wide_cnn():
    m = normalize(build("mobilenet_v2_tiny"), None).model
    out, feeds = apply("tiling", m, TILES, target="npu")
    same_numerics(m, out, feeds)
    assert arena(out) < 0.75 * arena(m)


def test_on_a_quantized_graph_tiles_agree_within_one_quantization_step():
    m = normalize(build("mobilenet_v2_tiny"), None).model
    q, feeds = apply("int8", m, {"scope": "all", "activation_type": "QUInt8", "weight_type": "QInt8",
                                 "per_channel": True, "calibrate_method": "MinMax"}, target="npu")
    out, _ = apply("tiling", q, TILES, target="npu", feeds=feeds)
    assert arena(out) < arena(q)
    # each tile's conv dequantizes its own copy of the weights: one integer kernel per tile, no
    # float kernel of shared weights whose output stays alive across the tiles
    kernels = group_kernels(out, tensor_infos(out))
    assert not [k.node_names for k in kernels if k.op_type == "DequantizeLinear" and not k.inputs]
    # float sums in another order can flip a rounding: at most a few elements, by one step
    same_numerics(q, out, feeds, rtol=0, atol=0.05)


def test_illegal_without_slice_and_concat():
    m = windows_chain()
    fpga = backend("fpga").info
    site = ACTIONS["tiling"].sites(m, TILES, fpga)[0]
    assert "Slice" in ACTIONS["tiling"].legal(m, site, TILES, fpga)
