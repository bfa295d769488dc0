"""The predictor's input row: a kernel's features (metainfer_core.ir.features) joined with the
target's spec features. A kernel comes as a descriptor {"features": {...}, "layout": "NCHW" |
"NHWC" | "adapter", "host": pinned to the host} (plan_graph, or a library record through
`record_descriptor`). The spec alone is constant within one target; what it says about this
kernel varies: whether the device runs it at all (op set, precision datapath), the device's
throughput for its precision, whether its working set fits on chip, and rough compute /
memory / link times from those figures (roofline-style hints; the model still learns the real
cost). Measured targets (cpu) give no such figures: those columns are NaN."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from metainfer_core.ir.features import CATEGORICAL, NUMERIC

QDQ = ("QuantizeLinear", "DequantizeLinear")
ALIGNED = ("Conv", "ConvTranspose", "MatMul", "Gemm")
LAYOUT_SENSITIVE = ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")
EXTRA_CATEGORICAL = ["fused_with", "layout"]
TARGET_NUMERIC = ["on_device", "log_dtype_gflops", "fits_sram", "log_compute_us", "log_memory_us", "log_link_us",
                  "log_host_us", "align_pad", "launch_us"]
CAT_FEATURES = CATEGORICAL + EXTRA_CATEGORICAL
ALL_FEATURES = CAT_FEATURES + NUMERIC + TARGET_NUMERIC
# a kernel's place in its graph (graph_context), for kernel models that learn in-graph costs:
# a micro-benchmark's kernel is "standalone"
CONTEXT_CATEGORICAL = ["context", "producer", "consumer"]
# signed int8 activations: another integer kernel; bytes crossing an int8 region's border. A model
# saved before the region columns existed keeps the columns it learned (KernelModel.context_numeric)
CONTEXT_NUMERIC = ["producer_fan_out", "act_signed", "int8_region", "log_region_in", "log_region_out"]
CONTEXT_NUMERIC_V1 = ["producer_fan_out", "act_signed"]
STANDALONE = "standalone"
_FIGURES = ("sram_bytes", "sram_gbps", "dram_gbps", "link_gbps", "host_gflops", "host_gbps", "launch_overhead_us",
            "channel_align", "weights_streamed", "weight_gbps", "preferred_layout", "layout_penalty")


@dataclass(frozen=True)
class TargetSpec:
    """The spec figures the predictor uses; every field is optional (None: not given)."""
    name: str = ""
    supported_ops: tuple[str, ...] | None = None
    peak_gflops: dict | None = None
    sram_bytes: float | None = None
    sram_gbps: float | None = None
    dram_gbps: float | None = None
    link_gbps: float | None = None
    host_gflops: float | None = None
    host_gbps: float | None = None
    launch_overhead_us: float | None = None
    channel_align: int | None = None
    weights_streamed: bool | None = None     # weights load from flash kernel by kernel, at weight_gbps
    weight_gbps: float | None = None
    preferred_layout: str | None = None      # a layout-sensitive kernel away from it pays a reformat pass
    layout_penalty: float | None = None

    @staticmethod
    def from_spec(name: str, spec: dict) -> "TargetSpec":
        ops = spec.get("supported_ops")
        return TargetSpec(name=name, supported_ops=tuple(ops) if ops is not None else None,
                          peak_gflops=dict(spec["peak_gflops"]) if spec.get("peak_gflops") else None,
                          **{k: spec.get(k) for k in _FIGURES})

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["supported_ops"] = list(self.supported_ops) if self.supported_ops is not None else None
        return d

    @staticmethod
    def from_dict(d: dict) -> "TargetSpec":
        d = dict(d)
        if d.get("supported_ops") is not None:
            d["supported_ops"] = tuple(d["supported_ops"])
        return TargetSpec(**d)

    @property
    def modeled(self) -> bool:
        return self.peak_gflops is not None

    def runs_on_device(self, ops: list[str], dtype: str) -> bool:
        if not self.modeled:
            return True
        if self.supported_ops is not None and not set(ops) - set(QDQ) <= set(self.supported_ops):
            return False
        return dtype in self.peak_gflops


def _log(x: float) -> float:
    return math.log10(1.0 + max(x, 0.0))


def kernel_ops(desc: dict) -> list[str]:
    """The ops the device must offer to run a kernel, from what its features tell (so library
    records and plans agree): its compute ops; none for a lone layout adapter, which the
    device kernel next to it absorbs. QDQ ops of a quantized op are implied by int8."""
    if desc.get("layout") == "adapter":
        return []
    return desc["features"]["op_type"].split("+")


def on_device(desc: dict, t: TargetSpec) -> bool:
    return not desc.get("host") and t.runs_on_device(kernel_ops(desc), desc["features"]["dtype"])


def _unlog(x: float) -> float:
    return 10 ** x - 1.0


def record_descriptor(record: dict) -> dict:
    """A library record as a kernel descriptor (its layout from the signature's attributes)."""
    sig = record.get("signature") or {}
    attrs = sig.get("attrs") if isinstance(sig, dict) else None
    return {"features": record["features"], "layout": (attrs or {}).get("layout", "NCHW"), "host": False}


def join(desc: dict, t: TargetSpec) -> dict:
    """One predictor row from a kernel descriptor."""
    features = desc["features"]
    row = {f: features.get(f) for f in CATEGORICAL + NUMERIC}
    parts = features["op_type"].split("+")
    row["fused_with"] = "+".join(parts[1:]) or "-"
    row["layout"] = desc.get("layout") or "NCHW"
    nan = float("nan")
    if not t.modeled:
        row.update({f: nan for f in TARGET_NUMERIC})
        return row
    dtype = features["dtype"]
    flops = _unlog(features["log_flops"])
    weight_bytes = _unlog(features["log_bytes_weights"])
    streamed = bool(t.weights_streamed)
    acts = sum(_unlog(features[f]) for f in ("log_bytes_in", "log_bytes_out"))
    moved = acts + weight_bytes
    on_chip = acts if streamed else moved       # what the device kernel reads and writes itself
    # streamed weights load from flash before the kernel runs (the simulator's cost structure)
    load_us = weight_bytes / (float(t.weight_gbps or t.dram_gbps or nan) * 1e3) if streamed and weight_bytes else 0.0
    device = on_device(desc, t)
    gflops = float(t.peak_gflops.get(dtype, 0.0))
    pad = 1.0
    if t.channel_align and parts[0] in ALIGNED and features.get("out_channels"):
        c = max(int(features["out_channels"]), 1)
        pad = math.ceil(c / t.channel_align) * t.channel_align / c
    fits = t.sram_bytes is not None and on_chip <= t.sram_bytes
    bw = (t.sram_gbps if fits else t.dram_gbps) or nan
    # away from the device's layout, a layout-sensitive kernel runs slower and the runtime
    # reformats its input and output (one more launch reading and writing both)
    off = (t.preferred_layout is not None and parts[0] in LAYOUT_SENSITIVE
           and (desc.get("layout") or "NCHW") not in (t.preferred_layout, "adapter"))
    penalty = float(t.layout_penalty) if off and t.layout_penalty else 1.0
    reformat_us = (float(t.launch_overhead_us or 0.0) + 2 * acts / (bw * 1e3)) if penalty < 1.0 else 0.0
    row.update({
        "on_device": float(device),
        "log_dtype_gflops": _log(gflops),
        "fits_sram": float(fits),
        "log_compute_us": _log(flops * pad / (gflops * penalty * 1e3)) if gflops else nan,
        "log_memory_us": _log(on_chip / (bw * 1e3)),
        # a standalone kernel on the host stages its inputs and outputs over the link
        "log_link_us": _log((_unlog(features["log_bytes_in"]) + _unlog(features["log_bytes_out"]))
                            / (t.link_gbps * 1e3)) if t.link_gbps else nan,
        "log_host_us": _log(flops / (t.host_gflops * 1e3) + moved / (t.host_gbps * 1e3))
        if t.host_gflops and t.host_gbps else nan,
        "align_pad": pad,
        # beside the roofline: the launch, on a weight-streaming device the weights' load, away
        # from the device's layout the reformat pass
        "launch_us": float(t.launch_overhead_us or 0.0) + load_us + reformat_us,
    })
    return row


def baseline_ms(df: pd.DataFrame) -> np.ndarray:
    """A roofline hint per row from the spec figures (ms); the model learns log(latency /
    hint), which carries over to kernels larger than any it was trained on. 1 where the
    target gives no figures (measured targets)."""
    if df.empty or df["on_device"].isna().all():
        return np.ones(len(df))
    u = lambda c: np.power(10.0, df[c].fillna(0.0).to_numpy()) - 1.0  # noqa: E731
    device = np.maximum(u("log_compute_us"), u("log_memory_us")) + df["launch_us"].fillna(0.0).to_numpy()
    host = u("log_host_us") + u("log_link_us")
    us = np.where(df["on_device"].to_numpy() > 0, device, host)
    return np.maximum(us, 1e-3) / 1e3


def cat_features(contextual: bool = False) -> list[str]:
    return CAT_FEATURES + (CONTEXT_CATEGORICAL if contextual else [])


def frame(descs: list[dict], t: TargetSpec, contextual: bool = False,
          context_numeric: list[str] | None = None) -> pd.DataFrame:
    """One row per descriptor; with `contextual`, also where the kernel sits in its graph
    (descriptors without a place, micro-benchmarks, are "standalone"; `context_numeric`: the
    numeric context columns, CONTEXT_NUMERIC unless a saved model learned fewer)."""
    rows = [join(d, t) for d in descs]
    columns = ALL_FEATURES
    numeric = (context_numeric or CONTEXT_NUMERIC) if contextual else []
    if contextual:
        columns = ALL_FEATURES + CONTEXT_CATEGORICAL + numeric
        for row, d in zip(rows, descs):
            row.update({c: d.get(c, STANDALONE) for c in CONTEXT_CATEGORICAL})
            row.update({c: d.get(c, float("nan")) for c in numeric})
    df = pd.DataFrame(rows, columns=columns)
    for c in cat_features(contextual):
        df[c] = df[c].astype(str)
    for c in NUMERIC + TARGET_NUMERIC + numeric:
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(np.float64)
    return df
