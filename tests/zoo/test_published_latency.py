"""The modeled targets reproduce their devices' published latencies: MobileNet v2 at 224x224,
built full size, compiled as the device's toolchain compiles it (int8 or fp16, its native
layout, weight prefetch), lands within ±30 % of the vendor's figure (conf/target/*.yaml cite
the documents). A spec change that drifts a target away from its device fails here."""
from __future__ import annotations

import numpy as np
import pytest

from metainfer_core.zoo.published import PUBLISHED, TOLERANCE, simulated_ms, vendor_plan, reference_network
from metainfer_core.ir.directives import DOUBLE_BUFFER_KEY
from metainfer_core.ir.kernels import group_kernels

from twins import backend


@pytest.mark.parametrize("pub", PUBLISHED, ids=lambda p: f"{p.target}-{p.precision}")
def test_simulated_latency_is_within_30_percent_of_the_published_one(pub):
    sim = simulated_ms(pub, backend(pub.target))
    assert abs(sim - pub.ms) <= TOLERANCE * pub.ms, f"{pub.device}: simulated {sim:.3f} ms, published {pub.ms:.3f} ms"


def test_the_reference_network_is_full_size():
    net = reference_network("mobilenet_v2")
    params = sum(int(np.prod(i.dims)) for i in net.graph.initializer)
    kernels = group_kernels(net)
    assert 3.4e6 < params < 3.6e6                                   # MobileNetV2 1.0: 3.5 M parameters
    assert 5.9e8 < sum(k.flops for k in kernels) < 6.2e8           # 300 M multiply-accumulates


def test_the_vendor_plan_runs_on_the_device():
    """The int8 plan runs on the npu's integer units, channels-last, with its weights prefetched;
    the fp32 network alone would fall back to the host (the npu has no fp32 datapath)."""
    npu = backend("npu")
    plan = vendor_plan(reference_network("mobilenet_v2"), npu, "int8")
    kernels = group_kernels(plan)
    on_device = npu.device.placement(kernels)
    convs = [k for k in kernels if k.op_type.startswith("Conv")]
    assert all(k.dtype == "int8" and k.layout == "NHWC" for k in convs)
    assert sum(on_device) >= len(kernels) - 4                        # the boundary reorders run on the host
    assert any(p.key == DOUBLE_BUFFER_KEY for p in plan.metadata_props)
    assert not any(npu.device.placement(group_kernels(reference_network("mobilenet_v2"))))
