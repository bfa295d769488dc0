"""Plan-wide directives that leave the numerics untouched: the memory reuse strategy and the
compute/copy overlap schedule; and the operator binding every candidate reports."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from metainfer_core.accuracy.metric import run_cpu
from metainfer_core.actions import ACTIONS
from metainfer_core.ir.kernels import bind, group_kernels
from metainfer_core.ir.directives import BIND_KEY, STRATEGY_KEY
from metainfer_core.ir.memory import model_strategy
from metainfer_core.normalize import normalize
from metainfer_core.zoo import build

from action_checks import apply
from twins import backend
from graphs import model_of


def identical(a, b, feeds):
    for ra, rb in zip(run_cpu(a, feeds), run_cpu(b, feeds)):
        for x, y in zip(ra, rb):
            assert np.array_equal(x, y)


def test_memory_reuse_records_the_policy_and_the_planner_honours_it():
    m = normalize(build("mobilenet_v2_tiny"), None).model
    fpga = backend("fpga")                                # its runtime gives every tensor a buffer
    out, feeds = apply("memory_reuse", m, {"strategy": "greedy"}, target="fpga")
    identical(m, out, feeds)
    assert model_strategy(out) == "greedy" and [n.op_type for n in out.graph.node] == [n.op_type for n in m.graph.node]
    assert fpga.compile(out).peak_bytes < 0.6 * fpga.compile(m).peak_bytes
    assert not ACTIONS["memory_reuse"].sites(out, {"strategy": "greedy"}, fpga.info)     # once
    ff, _ = apply("memory_reuse", out, {"strategy": "first_fit"}, target="fpga")
    assert [p.value for p in ff.metadata_props if p.key == STRATEGY_KEY] == ["first_fit"]


def test_memory_reuse_and_schedule_are_illegal_on_the_measured_runtime():
    m = build("resnet_tiny")
    cpu = backend("gpu").info.__class__(**{**backend("gpu").info.__dict__, "name": "cpu", "measurement": "measured",
                                            "extra": {}})
    for name, params in (("memory_reuse", {"strategy": "none"}), ("schedule", {"order": "memory", "double_buffer": False})):
        site = ACTIONS[name].sites(m, params, cpu)[0]
        assert "cpu" in ACTIONS[name].legal(m, site, params, cpu)


def branches():
    """Two branches off x: a wide one (64 ch) and a narrow one; a naive order keeps both wide tensors alive."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.2).astype(np.float32), n) for n, s in
             (("Wa", (64, 8, 1, 1)), ("Wb", (8, 64, 1, 1)), ("Wc", (64, 8, 1, 1)), ("Wd", (8, 64, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "Wa"], ["a"], name="a"),
             helper.make_node("Conv", ["x", "Wc"], ["c"], name="c"),
             helper.make_node("Conv", ["a", "Wb"], ["b"], name="b"),
             helper.make_node("Conv", ["c", "Wd"], ["d"], name="d"),
             helper.make_node("Add", ["b", "d"], ["y"], name="add")]
    return model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])], inits)


def test_memory_order_finishes_a_branch_before_starting_the_next():
    m = branches()
    npu = backend("npu")
    out, feeds = apply("schedule", m, {"order": "memory", "double_buffer": False}, target="npu")
    identical(m, out, feeds)
    assert [n.name for n in out.graph.node] == ["a", "b", "c", "d", "add"]
    assert npu.compile(out).peak_bytes < npu.compile(m).peak_bytes


def test_double_buffering_hides_transfers_behind_compute_for_memory():
    m = normalize(build("resnet_tiny"), None).model
    for n in m.graph.node:                          # pin every other Relu to the host: transfers both ways
        if n.op_type == "Relu" and n.name[-1] in "02468":
            n.metadata_props.add(key=BIND_KEY, value="host")
    spec = {"peak_gflops": {"int8": 8000, "float32": 2000}}
    out, feeds = apply("schedule", m, {"order": "keep", "double_buffer": True}, target="asic", supported_ops=None, **spec)
    identical(m, out, feeds)
    dev = backend("asic", supported_ops=None, **spec)
    base, hidden = dev.compile(m), dev.compile(out)
    assert base.host_kernels > 0
    assert hidden.base_us < base.base_us             # each upload streams during the kernel before it
    assert hidden.peak_bytes > base.peak_bytes       # ... into a second staging buffer
    plain = normalize(build("resnet_tiny"), None).model  # every kernel on the gpu: nothing to overlap
    assert not ACTIONS["schedule"].sites(plain, {"order": "keep", "double_buffer": True}, backend("gpu").info)


def test_binding_sends_unsupported_kernels_to_the_host_with_reasons():
    m = normalize(build("mobilenet_v2_tiny"), None).model
    info = backend("asic").info                     # int8 only, no Clip
    ks = group_kernels(m)
    reasons = bind(ks, info.supported_ops, info.dtypes)
    assert all(r is not None for r in reasons)      # fp32: no datapath at all
    assert any("Clip" in r for r in reasons) and any("float32 datapath" in r for r in reasons)
