"""The modeled backends: costs follow the spec in conf/target/*.yaml."""
from __future__ import annotations

import numpy as np
import pytest

from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.ir.directives import BIND_KEY
from metainfer_core.ir.kernels import group_kernels
from metainfer_core.ir.tensors import random_feeds, tensor_infos
from metainfer_core.zoo import build

from graphs import conv_chain
from twins import backend

MODELED = ["gpu", "npu", "fpga", "asic"]


def _int8(m):
    params = {"scope": "all", "activation_type": "QUInt8", "weight_type": "QInt8", "per_channel": True,
              "calibrate_method": "MinMax"}
    site = ACTIONS["int8"].sites(m, params, backend("npu").info)[0]
    return ACTIONS["int8"].apply(m, site, params, ActionContext(calibration_feeds=[random_feeds(m)]))


def test_modeled_info_says_modeled():
    for t in MODELED:
        assert backend(t).info.measurement == "modeled"


def test_unsupported_precision_falls_back_to_host_and_costs_more():
    m = conv_chain(cin=32, cout=32, size=32)
    npu = backend("npu")                       # no fp32 datapath
    fp32 = npu.benchmark(m, reps=5, warmup=0)
    int8 = npu.benchmark(_int8(m), reps=5, warmup=0)
    assert fp32.fallback and not int8.fallback
    assert int8.median_ms < fp32.median_ms / 3


def test_op_outside_op_set_pays_host_and_link():
    m = conv_chain(extra_op="Tanh")            # Tanh is not in the fpga op set
    fpga = backend("fpga")
    with_tanh = backend("fpga", supported_ops=fpga.spec["supported_ops"] + ["Tanh"])
    infos = tensor_infos(m)
    ks = group_kernels(m, infos)
    assert "Tanh" in fpga.device.unsupported_reason(ks[-1])
    total, host = fpga.device.graph_us(ks, infos)
    _, none = with_tanh.device.graph_us(ks, infos)
    assert (host, none) == (1, 0)
    # device kernels + the host kernel + the link both ways: x goes up, r comes back down
    expected = (sum(fpga.device.device_us(k) for k in ks[:-1]) + fpga.device.host_us(ks[-1])
                + fpga.device.link_us(infos["x"].nbytes) + fpga.device.link_us(infos["r"].nbytes))
    assert total == pytest.approx(expected)


def test_sram_spill_slows_memory_bound_kernels():
    m = conv_chain(cin=16, cout=16, size=256)    # int8 in + out = 2 MiB > a 1 MiB SRAM
    roomy = backend("npu", sram_bytes=1 << 30).benchmark(_int8(m), reps=3, warmup=0).median_ms
    tight = backend("npu", sram_bytes=1 << 20).benchmark(_int8(m), reps=3, warmup=0).median_ms
    assert tight > roomy


def test_noise_is_seeded():
    m = conv_chain()
    a = [backend("gpu").compile(m).time_once({}) for _ in range(2)]
    b = [backend("gpu").compile(m).time_once({}) for _ in range(2)]
    assert a == b and len({round(x, 12) for x in a}) >= 1


def test_fusion_cuts_launch_overhead():
    m = conv_chain(extra_op="Sigmoid")
    gpu = backend("gpu")
    site = ACTIONS["fuse_chain"].sites(m, {"max_depth": 4}, gpu.info)[0]
    fused = ACTIONS["fuse_chain"].apply(m, site, {"max_depth": 4}, ActionContext(target=gpu.info))
    assert len(group_kernels(fused)) == 1
    assert gpu.benchmark(fused, reps=9, warmup=0).median_ms < gpu.benchmark(m, reps=9, warmup=0).median_ms


def test_numerics_match_cpu_reference():
    m = build("mobilenet_v2_tiny")
    feeds = random_feeds(m)
    import onnxruntime as ort

    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(backend("fpga").compile(m).run(feeds)[0], ref, rtol=1e-5, atol=1e-6)


def test_targets_rank_the_same_kernels_differently():
    """The same model's kernel costs order differently on different devices (SPEC section 1)."""
    m = _int8(build("efficientnet_tiny"))      # every modeled target has an int8 datapath
    infos = tensor_infos(m)
    ks = group_kernels(m, infos)
    orders = {}
    for t in MODELED:
        dev = backend(t).device
        costs = [dev.device_us(k) if dev.unsupported_reason(k) is None else dev.host_us(k) for k in ks]
        orders[t] = tuple(np.argsort(costs, kind="stable"))
    assert len(set(orders.values())) == len(MODELED)


@pytest.mark.parametrize("name", MODELED)
def test_memory_is_the_liveness_estimate(name):
    m = build("resnet_tiny")
    dev = backend(name)
    peak = dev.compile(m).peak_memory({})
    weights = sum(int(np.prod(i.dims)) * 4 for i in m.graph.initializer)
    if dev.spec.get("weights_streamed"):            # the npu loads weights kernel by kernel from flash
        assert 0 < peak < weights
    else:
        assert weights < peak < weights + 4 * 1024 * 1024


def test_off_layout_convs_pay_a_reformat_and_lower_efficiency():
    m = conv_chain(cin=32, cout=32, size=32)
    gpu = backend("gpu")                            # prefers NHWC
    conv = group_kernels(m)[0]
    assert conv.layout == "NCHW" and gpu.device.off_layout(conv)
    same = backend("gpu", preferred_layout="NCHW").device
    assert gpu.device.device_us(conv) > same.device_us(conv) + gpu.spec["launch_overhead_us"] * 0.99
    assert not same.off_layout(conv)


def test_bf16_kernels_need_a_bf16_datapath():
    m = conv_chain()
    site = ACTIONS["bf16"].sites(m, {"scope": "all"}, backend("gpu").info)[0]
    bf = ACTIONS["bf16"].apply(m, site, {"scope": "all"}, ActionContext(target=backend("gpu").info))
    ks = group_kernels(bf)
    assert {k.dtype for k in ks} == {"bfloat16"}
    assert backend("gpu").benchmark(bf, reps=3, warmup=0).fallback is False
    assert backend("npu").benchmark(bf, reps=3, warmup=0).fallback is True      # no bf16 units: host


def test_micro_benchmarks_time_kernels_as_they_run_in_a_graph():
    """A kernel's inputs already sit on the device; a host-bound kernel pays its round trip."""
    m = conv_chain(cin=32, cout=32, size=32)
    gpu = backend("gpu")
    infos = tensor_infos(m)
    ks = group_kernels(m, infos)
    t = gpu.benchmark(m, reps=3, warmup=0).median_ms * 1e3
    assert t == pytest.approx(sum(gpu.device.device_us(k) for k in ks), rel=0.1)
    tanh = conv_chain(extra_op="Tanh")
    fpga = backend("fpga")
    infos = tensor_infos(tanh)
    ks = group_kernels(tanh, infos)
    total, host = fpga.device.graph_us(ks, infos, standalone=True, outputs={"y"})
    expected = (sum(fpga.device.device_us(k) for k in ks[:-1]) + fpga.device.host_us(ks[-1])
                + fpga.device.link_us(infos["r"].nbytes) + fpga.device.link_us(infos["y"].nbytes))
    assert host == 1 and total == pytest.approx(expected)


def test_pinned_kernels_run_on_the_host():
    m = conv_chain()
    m.graph.node[1].metadata_props.add(key=BIND_KEY, value="host")
    gpu = backend("gpu")
    assert gpu.compile(m).host_kernels == 1


def test_streamed_weights_load_before_their_kernel_unless_double_buffered():
    """The npu loads each kernel's weights from flash (weight_gbps) before it runs; double
    buffering prefetches them while the previous kernel runs, for a second weight buffer."""
    m = _int8(build("resnet_tiny"))
    npu = backend("npu")
    infos = tensor_infos(m)
    ks = group_kernels(m, infos)
    serial, _ = npu.device.graph_us(ks, infos)
    overlapped, _ = npu.device.graph_us(ks, infos, double_buffer=True)
    loads = sum(npu.device.weight_load_us(k) for k in ks)
    assert loads > 0.2 * serial                               # 0.5 GB/s flash: weights are a real cost
    # each load hides behind the kernel before it, as far as that kernel lasts (weight-bound here)
    dev = npu.device
    run = [dev.device_us(k) if on else dev.host_us(k) for k, on in zip(ks, dev.placement(ks))]
    load = [dev.link_us(b) + (dev.weight_load_us(k) if on else 0.0)
            for k, on, b in zip(ks, dev.placement(ks), dev.transfers(ks, infos, dev.placement(ks)))]
    hidden = sum(min(ld, r) for ld, r in zip(load[1:], run))
    assert serial - overlapped == pytest.approx(hidden, rel=1e-6) and hidden > 0
    assert backend("npu", weight_gbps=100).device.graph_us(ks, infos)[0] < serial - 0.9 * loads
    assert backend("gpu").device.weight_load_us(ks[1]) == 0.0          # resident weights load once
    site = ACTIONS["schedule"].sites(m, {"order": "keep", "double_buffer": True}, npu.info)
    db = ACTIONS["schedule"].apply(m, site[0], {"order": "keep", "double_buffer": True}, ActionContext(target=npu.info))
    assert npu.compile(db).peak_bytes > npu.compile(m).peak_bytes   # the second weight buffer
