"""Published latencies of the devices the modeled targets are modeled after, and the simulated
latency of the same network compiled the way that device's toolchain compiles it.

Each figure is a vendor's (or a vendor-documented benchmark's) end-to-end time for one standard
network at batch 1; conf/target/<name>.yaml names the document it comes from. The network is
built full size from the zoo's reference builders (random seeded weights: latency does not
depend on their values), normalized as every run is, then given the plan the vendor's compiler
applies: its precision (int8 by calibration, or fp16), its native layout where the device reads
channels-last, and double buffering where it streams weights from flash. The simulated time is
the cost model's, without the run-to-run noise: still a MODELED figure, not a measurement."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import onnx

from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.backends.simulator import SimulatedBackend
from metainfer_core.ir.directives import double_buffered
from metainfer_core.ir.kernels import group_kernels
from metainfer_core.ir.tensors import random_feeds, tensor_infos
from metainfer_core.normalize.pipeline import normalize
from metainfer_core.zoo import build

TOLERANCE = 0.30           # the simulated latency stays within ±30 % of the published one


@dataclass(frozen=True)
class Published:
    target: str            # conf/target/<target>.yaml
    device: str            # the public device it is modeled after
    network: str           # a zoo reference builder
    precision: str         # "int8", "float16" or "float32"
    ms: float              # published latency, batch 1
    source: str


PUBLISHED = [
    Published("npu", "Arm Ethos-U55-128 @ 500 MHz", "mobilenet_v2", "int8", 7_346_172 / 500e6 * 1e3,
              "Arm ML embedded evaluation kit, docs/use_cases/img_class.md (7,346,172 NPU cycles)"),
    Published("asic", "Google Edge TPU (Coral Dev Board)", "mobilenet_v2", "int8", 2.6,
              "Coral, Edge TPU performance benchmarks, Table 1"),
    Published("fpga", "DPUCZDX8G B4096 @ 281 MHz (ZCU102)", "mobilenet_v2", "int8", 4.15,
              "Vitis AI Model Zoo 1.3 README, Performance on ZCU102 (one thread)"),
    Published("gpu", "NVIDIA T4 (TensorRT 8.0)", "mobilenet_v2", "float16", 0.5926,
              "Paddle Inference, GPU benchmark (T4, batch 1)"),
    Published("gpu", "NVIDIA T4 (TensorRT 8.0)", "mobilenet_v2", "float32", 1.1125,
              "Paddle Inference, GPU benchmark (T4, batch 1)"),
]

_INT8 = {"scope": "all", "activation_type": "QUInt8", "weight_type": "QInt8", "per_channel": True,
         "calibrate_method": "MinMax"}


def _apply(name: str, model: onnx.ModelProto, params: dict, backend: SimulatedBackend, feeds=()) -> onnx.ModelProto:
    action, info = ACTIONS[name], backend.info
    for site in action.sites(model, params, info):
        if action.legal(model, site, params, info) is None:
            model = action.apply(model, site, params, ActionContext(target=info, calibration_feeds=list(feeds)))
    return model


def vendor_plan(model: onnx.ModelProto, backend: SimulatedBackend, precision: str) -> onnx.ModelProto:
    """`model` (normalized) as the device's own toolchain would compile it."""
    if precision == "int8":
        model = _apply("int8", model, _INT8, backend, [random_feeds(model)])
    elif precision == "float16":
        model = _apply("fp16", model, {"scope": "all"}, backend)
    elif precision != "float32":
        raise ValueError(f"precision {precision!r} is not int8, float16 or float32")
    if backend.info.preferred_layout == "NHWC":
        model = _apply("layout", model, {"layout": "NHWC"}, backend)
    if backend.info.extra.get("weights_streamed"):
        model = _apply("schedule", model, {"order": "keep", "double_buffer": True}, backend)
    return model


@lru_cache(maxsize=4)
def reference_network(name: str) -> onnx.ModelProto:
    """The reference network at batch 1, normalized (callers must not modify it)."""
    net = build(name)
    shapes = {i.name: [1] + [d.dim_value for d in i.type.tensor_type.shape.dim[1:]] for i in net.graph.input}
    return normalize(net, shapes).model


def simulated_ms(pub: Published, backend: SimulatedBackend) -> float:
    """The modeled latency of `pub`'s network on `backend` (its noise left out)."""
    plan = vendor_plan(reference_network(pub.network), backend, pub.precision)
    infos = tensor_infos(plan)
    kernels = group_kernels(plan, infos)
    return backend.device.graph_us(kernels, infos, double_buffer=double_buffered(plan))[0] / 1e3
