"""Static int8 quantization in QDQ form (the format of ONNX Runtime's quantize_static), written
directly: one pass over the graph, linear in its size. ONNX Runtime's own tool is quadratic in
the node count (about 13 s for a 1000-node graph), too slow to apply inside a search.

Calibration runs the graph once on the calibration inputs with every float activation exposed
and keeps one range per tensor (MinMax, Percentile or Entropy), cached per run; a derived
tensor ("x|nhwc", "a&b") takes the range of its origins, and only a tensor without any is
calibrated again on the graph that holds it.

Format, as ONNX Runtime writes it: activations read by a quantized op go through
QuantizeLinear -> DequantizeLinear (per tensor, asymmetric); weights of Conv/MatMul/Gemm are
stored int8/uint8 (per channel or per tensor) behind a DequantizeLinear; biases int32 with
scale = input scale x weight scale; the output of a quantized op goes through Q -> DQ.
Relu/Clip in scope right after a quantized op are folded into that op's output range (the
saturating Q computes them); MaxPool/Reshape/Flatten share their input's scale.

Placement "inputs" is OpenVINO's convention (what NNCF writes): only what a quantized op reads
is quantized (activations symmetric, zero point 0: uint8 where the calibrated range is
non-negative, else int8), biases stay float and outputs stay float. OpenVINO's CPU plugin runs
such a Conv/MatMul as an int8 kernel with a float output; ONNX Runtime fuses only the
"inputs_outputs" form into its QLinear kernels."""
from __future__ import annotations

from collections import defaultdict
import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from metainfer_core.actions.base import commit_rewrite, derived, infos_of, opset_of, origins, wiring
from metainfer_core.ir.graph_utils import attr_value, clone, node_reads
from metainfer_core.ir.runs import exposed_runs
from metainfer_core.ir.tensors import tensor_infos

COMPUTE_OPS = ("Conv", "MatMul", "Gemm")
PLACEMENTS = ("inputs_outputs", "inputs")
INPUTS_ONLY_OPS = ("ConvTranspose",)       # quantized under placement "inputs" (OpenVINO runs it int8)
# placement "inputs", scope "compute": besides the weighted ops, the ops OpenVINO runs in int8
# beside them: a residual Add of two activations (fused into the Conv before it as an int8 sum)
# and average pooling (NNCF's CPU rules)
INPUTS_COMPUTE_OPS = COMPUTE_OPS + INPUTS_ONLY_OPS + ("Add", "GlobalAveragePool", "AveragePool")
ALL_OPS = COMPUTE_OPS + ("Add", "Mul", "Relu", "Clip", "LeakyRelu", "Sigmoid", "MaxPool", "AveragePool",
                         "GlobalAveragePool", "Concat", "Flatten", "Reshape")
_SHARE_SCALE = {"MaxPool", "Flatten", "Reshape"}
# ops that only move or select their first input's values: a quantizer passes through them
_PRESERVING = {"MaxPool", "Resize", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Upsample",
               "DepthToSpace", "SpaceToDepth"}
_FOLDABLE = {"Relu", "Clip"}
_F32 = onnx.TensorProto.FLOAT
_BIAS_LIMIT = float(2**31 - 1)   # int32 bias range

Range = tuple[float, float]


# --- calibration ---------------------------------------------------------------------------

def _entropy_threshold(values: np.ndarray, bins: int = 2048, qbins: int = 128) -> float:
    """The clipping threshold of |x| whose 128-level quantization keeps the distribution
    closest in KL divergence (TensorRT's entropy calibration, on a coarse threshold grid)."""
    a = np.abs(values)
    a = a[a > 0]            # exact zeros (a ReLU's half) quantize exactly at any threshold
    amax = float(a.max(initial=0.0))
    if amax == 0.0:
        return 0.0
    hist, edges = np.histogram(a, bins=bins, range=(0.0, amax))
    best, best_t = np.inf, amax
    for i in range(qbins, bins + 1, qbins // 4):
        p = hist[:i].astype(np.float64)
        p[-1] += hist[i:].sum()           # the reference: everything beyond the threshold clipped onto it
        # the candidate: the unclipped bins merged into qbins levels, spread back over their nonzero bins
        chunks = hist[:i].astype(np.float64)[: i - i % qbins].reshape(qbins, -1) if i % qbins == 0 else \
            np.array_split(hist[:i].astype(np.float64), qbins)
        q = np.concatenate([np.where(c > 0, c.sum() / max(int((c > 0).sum()), 1), 0.0) for c in chunks])
        mask = p > 0
        if q.sum() <= 0:
            continue
        ps, qs = p[mask] / p.sum(), q[mask] / q.sum()
        kl = float(np.sum(ps * np.log(ps / np.maximum(qs, 1e-12))))
        if kl < best:
            best, best_t = kl, float(edges[i])
    return best_t


def _range(values: np.ndarray, method: str) -> Range:
    v = values.astype(np.float64, copy=False)
    if method == "MinMax":
        lo, hi = float(v.min()), float(v.max())
    elif method == "Percentile":
        lo, hi = float(np.percentile(v, 0.001)), float(np.percentile(v, 99.999))
    elif method == "Entropy":
        t = _entropy_threshold(v)
        lo, hi = (-t if v.min() < 0 else 0.0), t
    else:
        raise ValueError(f"unknown calibrate_method {method!r}")
    return min(lo, 0.0), max(hi, 0.0)


def calibrate(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], method: str) -> dict[str, Range]:
    """One range per float32 activation (graph inputs included), from a run on `feeds`."""
    if not feeds:
        raise ValueError("int8 needs calibration inputs")
    infos = tensor_infos(model)
    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    names += [o for n in model.graph.node for o in n.output if o]
    names = [t for t in dict.fromkeys(names) if t in infos and infos[t].dtype == np.float32]
    runs = list(exposed_runs(model, names, feeds, {t: _F32 for t in names},
                             optimization=ort.GraphOptimizationLevel.ORT_DISABLE_ALL))
    return {t: _range(np.concatenate([np.asarray(r[j]).ravel() for r in runs]), method) for j, t in enumerate(names)}


class RangeTable:
    """Calibrated ranges of one run, shared by every int8 apply and sensitivity probe."""

    def __init__(self, feeds: list[dict[str, np.ndarray]], method: str):
        self.feeds, self.method = feeds, method
        self.ranges: dict[str, Range] = {}

    def lookup(self, t: str) -> Range | None:
        if t in self.ranges:
            return self.ranges[t]
        found = [self.ranges[o] for o in origins(t) if o in self.ranges]
        return (min(r[0] for r in found), max(r[1] for r in found)) if found else None

    def ensure(self, model: onnx.ModelProto, tensors: list[str]) -> None:
        if any(self.lookup(t) is None for t in tensors):
            for t, r in calibrate(model, self.feeds, self.method).items():
                self.ranges.setdefault(t, r)


def range_table(cache: dict, feeds: list[dict[str, np.ndarray]], method: str) -> RangeTable:
    key = f"int8.ranges.{method}"
    if key not in cache:
        cache[key] = RangeTable(feeds, method)
    return cache[key]


# --- quantization parameters ---------------------------------------------------------------

def _act_params(r: Range, qtype: str) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = r
    qmin, qmax, dt = (0, 255, np.uint8) if qtype == "QUInt8" else (-128, 127, np.int8)
    scale = (hi - lo) / (qmax - qmin) or 1.0
    zp = int(np.clip(round(qmin - lo / scale), qmin, qmax))
    return np.array(scale, np.float32), np.array(zp, dt)


def _symmetric_act_params(r: Range) -> tuple[np.ndarray, np.ndarray]:
    """Zero point 0: uint8 over [0, hi] for a non-negative tensor, else int8 over [-amax, amax]."""
    lo, hi = r
    if lo >= 0:
        return np.array(hi / 255.0 or 1.0, np.float32), np.array(0, np.uint8)
    return np.array(max(-lo, hi) / 127.0 or 1.0, np.float32), np.array(0, np.int8)


def _weight_quant(w: np.ndarray, axis: int | None, qtype: str, min_scale: np.ndarray | None = None):
    """(quantized weights, scale, zero point) per channel along `axis`, or per tensor; scales no
    smaller than `min_scale` (what the int32 bias needs)."""
    reduce = tuple(i for i in range(w.ndim) if i != axis) if axis is not None else None
    if qtype == "QInt8":    # symmetric, zero point 0
        amax = np.abs(w).max(axis=reduce)
        scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
        zp = np.zeros_like(scale, dtype=np.int8)
        lo_q, hi_q, dt = -127, 127, np.int8
    else:                   # asymmetric uint8
        lo = np.minimum(w.min(axis=reduce), 0.0)
        hi = np.maximum(w.max(axis=reduce), 0.0)
        scale = np.where(hi > lo, (hi - lo) / 255.0, 1.0).astype(np.float32)
        zp = np.clip(np.round(-lo / scale), 0, 255).astype(np.uint8)
        lo_q, hi_q, dt = 0, 255, np.uint8
    if min_scale is not None:
        scale = np.maximum(scale, min_scale).astype(np.float32)
        if qtype != "QInt8":
            zp = np.clip(np.round(-lo / scale), 0, 255).astype(np.uint8)
    shape = [1] * w.ndim
    if axis is not None:
        shape[axis] = -1
    q = np.clip(np.round(w / scale.reshape(shape)) + zp.reshape(shape).astype(np.float32), lo_q, hi_q).astype(dt)
    return q, scale, zp


# per_channel="auto": a weight keeps one scale per output channel only where its channels'
# ranges differ by more than this (largest channel abs-max over the median one); elsewhere one
# scale loses little and integer kernels can run faster (ONNX Runtime on the 2-core build cpu,
# bench/per_tensor_weights.py: the zoo mlp's QGemm chain 0.0227 -> 0.0165 ms, the other zoo
# models within 2 % of per channel; accuracy effect between per channel's and per tensor's)
AUTO_SPREAD = 2.0


def channel_spread(w: np.ndarray, axis: int) -> float:
    """Largest per-channel abs-max over the median one (1.0: all channels alike)."""
    amax = np.abs(w).max(axis=tuple(i for i in range(w.ndim) if i != axis))
    median = float(np.median(amax)) if amax.size else 0.0
    return float(amax.max()) / median if median > 0 else float("inf")


def weight_axis(node: onnx.NodeProto, w: np.ndarray, per_channel: bool | str, opset: int) -> int | None:
    """The axis of a weight's scales (None: one scale for the tensor) under `per_channel`:
    True, False, or "auto" (per channel where channels differ: AUTO_SPREAD; per tensor below
    opset 13, which has no per-channel DequantizeLinear). Per tensor too where ONNX Runtime
    runs no per-channel scales (per_channel_runs)."""
    if not per_channel or not per_channel_runs(node, w.ndim):
        return None
    axis = _weight_axis(node, w.ndim)
    if per_channel == "auto":
        return axis if opset >= 13 and channel_spread(w, axis) > AUTO_SPREAD else None
    return axis


def per_channel_runs(node: onnx.NodeProto, rank: int) -> bool:
    """Whether ONNX Runtime runs the consumer with one weight scale per output channel. Not a
    MatMul whose B has rank other than 2: ORT fuses DQ -> MatMul into MatMulIntegerToFloat /
    QLinearMatMul, whose B scale and zero point must be one value (or one per column of a 2-D
    B): a batched weight [..., K, N] with scales on N fails at run time ("b zero point is not
    valid"; "For per axis quantization, scale must be 1D tensor with size 1" on a jax2tf model)."""
    return not (node.op_type == "MatMul" and rank != 2)


def _weight_axis(node: onnx.NodeProto, rank: int = 2) -> int:
    """The output-channel axis of the consumer's weight (input 1), by the op's semantics:
    Conv W [M, C/g, k...]: 0; ConvTranspose W [C, M/g, k...]: 1; Gemm B [K, N] (or [N, K] with
    transB): 1 (0); MatMul B [..., K, N]: the last axis (a rank-1 B, [K], has none: 0)."""
    if node.op_type == "Conv":
        return 0
    if node.op_type == "ConvTranspose":
        return 1
    if node.op_type == "Gemm":
        return 0 if attr_value(node, "transB", 0) else 1
    if node.op_type == "MatMul":
        return max(rank - 1, 0)
    raise ValueError(f"no weight axis for a {node.op_type} node ({node.name})")


# --- the rewrite ---------------------------------------------------------------------------

def quantize(model: onnx.ModelProto, node_names: set[str] | list[str] | tuple[str, ...], table: RangeTable,
             activation_type: str = "QUInt8", weight_type: str = "QInt8", per_channel: bool | str = True,
             placement: str = "inputs_outputs") -> onnx.ModelProto:
    """The graph with the named nodes (those of a quantizable type) in QDQ int8; weight scales
    per channel, per tensor, or "auto" (weight_axis); `placement` as in the module's docstring."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement {placement!r}: use one of {list(PLACEMENTS)}")
    inputs_only = placement == "inputs"
    out = clone(model)
    g = out.graph
    infos = infos_of(model)
    inits = {i.name: i for i in g.initializer}
    graph_outputs = {o.name for o in g.output}
    # an op whose output a subgraph (an If branch) reads stays float: a fold would rename that
    # output, and ONNX Runtime's QDQ fusion aborts the process on a DequantizeLinear read there
    read_inside = {t for n in g.node for t in node_reads(n) - set(n.input)}
    wanted = set(node_names)
    opset = opset_of(model)
    if per_channel is True and opset < 13:
        raise ValueError(f"per-channel quantization needs opset >= 13 (graph has {opset})")

    def is_float(t: str) -> bool:
        return t in infos and infos[t].dtype == np.float32 and t not in inits

    ops = ALL_OPS + (INPUTS_ONLY_OPS if inputs_only else ())
    weighted = COMPUTE_OPS + (INPUTS_ONLY_OPS if inputs_only else ())
    chosen = [n for n in g.node if n.name in wanted and n.op_type in ops and len(n.output) == 1
              and is_float(n.output[0]) and n.output[0] not in read_inside and any(is_float(i) for i in n.input)]
    chosen_ids = {id(n) for n in chosen}
    producer, consumers = wiring(g)

    # Relu/Clip right after a quantized op: its saturating output quantization computes them
    folded: set[int] = set()
    axes: dict[str, int | None] = {}

    def axis_of(n: onnx.NodeProto) -> int | None:
        """The node's weight scale axis, decided once per weight (a shared weight is quantized once)."""
        if n.input[1] not in axes:
            axes[n.input[1]] = weight_axis(n, numpy_helper.to_array(inits[n.input[1]]), per_channel, opset)
        return axes[n.input[1]]

    def bias_floor(n: onnx.NodeProto, b_name: str, x_scale: np.float64) -> np.ndarray:
        """The smallest weight scale per output channel that keeps round(bias / (input scale x
        weight scale)) inside int32. It only binds for a near-zero weight channel beside a real
        bias (PP-OCR's detector has some), whose weights then quantize to zero: a 1e-12 error
        instead of a wrapped int32 bias."""
        b = np.abs(numpy_helper.to_array(inits[b_name]).astype(np.float64))
        floor = b / (x_scale * _BIAS_LIMIT)
        return floor if axis_of(n) is not None else floor.max(initial=0.0)

    def quantized_bias(n: onnx.NodeProto, b_name: str, w_scale: np.ndarray, x_scale: np.float64) -> None:
        """int32 bias through a DQ: scale = input scale x weight scale (per channel)."""
        b = numpy_helper.to_array(inits[b_name]).astype(np.float64)
        bs = x_scale * w_scale.astype(np.float64) * np.ones_like(b)
        # clipped only when a shared weight was quantized for another node's bias first
        bq = np.clip(np.round(b / bs), -_BIAS_LIMIT, _BIAS_LIMIT).astype(np.int32)
        b_dq = derived(b_name, f"dq.{n.name}")
        before[id(n)].append(helper.make_node(
            "DequantizeLinear", [const(derived(b_name, f"int32.{n.name}"), bq),
                                 const(derived(b_name, f"scale.{n.name}"), bs.astype(np.float32)),
                                 const(derived(b_name, f"zp.{n.name}"), np.zeros_like(bq))],
            [b_dq], name=b_dq, axis=0))
        n.input[2] = b_dq

    for n in chosen:
        p = producer.get(n.input[0])
        if (not inputs_only and n.op_type in _FOLDABLE and p is not None and id(p) in chosen_ids and p.op_type not in _FOLDABLE
                and len(consumers[n.input[0]]) == 1 and n.input[0] not in graph_outputs
                and all(i == "" or i in inits for i in n.input[1:])):
            folded.add(id(n))
            p.output[0] = n.output[0]
    chosen = [n for n in chosen if id(n) not in folded]
    table.ensure(model, [t for n in chosen for t in list(n.input) + ([] if inputs_only else list(n.output))
                         if is_float(t)])

    new_inits: list[onnx.TensorProto] = []
    before: dict[int, list[onnx.NodeProto]] = defaultdict(list)
    after: dict[int, list[onnx.NodeProto]] = defaultdict(list)
    head: list[onnx.NodeProto] = []
    params: dict[str, tuple[str, str, np.ndarray]] = {}     # tensor -> scale name, zp name, scale value

    def const(name: str, arr: np.ndarray) -> str:
        new_inits.append(numpy_helper.from_array(arr, name))
        return name

    def qparams(t: str, share_from: str | None = None) -> tuple[str, str, np.ndarray]:
        if t not in params:
            if share_from is not None and share_from in params:
                params[t] = params[share_from]
            else:
                r = table.lookup(t)
                if r is None:
                    table.ensure(model, [t])        # a tensor a quantizer was lifted to
                    r = table.lookup(t)
                if r is None:
                    raise ValueError(f"no calibrated range for tensor {t!r}")
                s, z = _symmetric_act_params(r) if inputs_only else _act_params(r, activation_type)
                params[t] = (const(derived(t, "scale"), s), const(derived(t, "zp"), z), s)
        return params[t]

    q_of: dict[str, str] = {}                                # activation -> its int8 tensor
    dq_for: dict[tuple[str, int], str] = {}

    def quantized(t: str) -> str:
        """t's QuantizeLinear, placed right after t's producer (the graph start for an input)."""
        if t not in q_of:
            s_, z_, _ = qparams(t)
            q_of[t] = derived(t, "q8")
            p = producer.get(t)
            (after[id(p)] if p is not None else head).append(
                helper.make_node("QuantizeLinear", [t, s_, z_], [q_of[t]], name=derived(t, "q")))
        return q_of[t]

    def dequantized(t: str, reader: onnx.NodeProto) -> str:
        """A DequantizeLinear of t for this reader alone, right before it: a QDQ runtime folds
        it into the reader's integer kernel, so only the int8 tensor stays alive between kernels
        (ONNX Runtime's DedicatedQDQPair)."""
        if (t, id(reader)) not in dq_for:
            q = quantized(t)
            s_, z_, _ = params[t]
            dst = derived(t, f"dq.{reader.name}")
            before[id(reader)].append(helper.make_node("DequantizeLinear", [q, s_, z_], [dst], name=dst))
            dq_for[(t, id(reader))] = dst
        return dq_for[(t, id(reader))]

    weight_dq: dict[str, tuple[str, np.ndarray]] = {}

    def weight(n: onnx.NodeProto, min_scale: np.ndarray | None = None) -> np.ndarray:
        """Route the node's weight through int8 storage and a DQ; returns its scale."""
        w_name = n.input[1]
        if w_name not in weight_dq:
            w = numpy_helper.to_array(inits[w_name])
            axis = axis_of(n)
            q, s, z = _weight_quant(w, axis, weight_type, min_scale)
            extra = {"axis": axis} if axis is not None else {}
            w_dq = derived(w_name, "dq")
            before[id(n)].append(helper.make_node(
                "DequantizeLinear", [const(derived(w_name, "int8"), q), const(derived(w_name, "scale"), s),
                                     const(derived(w_name, "zp"), z)], [w_dq], name=w_dq, **extra))
            weight_dq[w_name] = (w_dq, s)
        n.input[1] = weight_dq[w_name][0]
        return weight_dq[w_name][1]

    through: set[int] = set()      # ops a quantizer was lifted through (once, for all their readers)

    def liftable(p: onnx.NodeProto | None, t: str) -> bool:
        return (inputs_only and p is not None and p.op_type in _PRESERVING | {"Concat"} and id(p) not in chosen_ids
                and t not in graph_outputs and all(id(c) in chosen_ids for c in consumers[t]))

    # a Concat's inputs share one scale (OpenVINO concatenates int8 data only when they do): the
    # union of their ranges, grouped before any of them is quantized for another reader
    group: dict[str, str] = {}

    def root(t: str) -> str:
        while group.get(t, t) != t:
            t = group[t]
        return t

    concats = [n for n in g.node if inputs_only and n.op_type == "Concat" and all(is_float(i) for i in n.input)
               and (id(n) in chosen_ids or liftable(n, n.output[0]))]
    for n in concats:
        for i in n.input[1:]:
            group[root(i)] = root(n.input[0])
    if concats:
        members = defaultdict(list)
        for t in {i for n in concats for i in n.input}:
            members[root(t)].append(t)
        table.ensure(model, [t for ts in members.values() for t in ts])
        for ts in members.values():
            rs = [table.lookup(t) for t in ts]
            s_, z_ = _symmetric_act_params((min(r[0] for r in rs), max(r[1] for r in rs)))
            shared = (const(derived(ts[0], "scale"), s_), const(derived(ts[0], "zp"), z_), s_)
            for t in ts:
                params[t] = shared

    def lifted(t: str, reader: onnx.NodeProto, slot: int) -> None:
        """Under placement "inputs", a quantizer for what `reader` reads moves up through the
        ops that only move or select values (MaxPool, Resize, ...) when every reader of their
        output is quantized: OpenVINO then runs those ops on int8 data too (NNCF's quantizer
        propagation); through a Concat, each of its inputs is quantized, with one scale."""
        p = producer.get(t)
        if liftable(p, t):
            slots = range(len(p.input)) if p.op_type == "Concat" else (0,)
            if id(p) not in through and all(is_float(p.input[i]) for i in slots):
                through.add(id(p))
                if p.op_type != "Concat" and t in params and p.input[0] not in params:
                    params[p.input[0]] = params[t]      # a Concat input's shared scale moves up with it
                for i in slots:
                    lifted(p.input[i], p, i)
            if id(p) in through:
                return
        reader.input[slot] = dequantized(t, reader)

    for n in chosen:
        first_in = n.input[0]
        for slot, t in enumerate(list(n.input)):
            if t and is_float(t):
                lifted(t, n, slot)
        if n.op_type in weighted and len(n.input) > 1 and n.input[1] in inits and inits[n.input[1]].data_type == _F32:
            b_name = n.input[2] if len(n.input) > 2 else ""
            if (not inputs_only and n.op_type in ("Conv", "Gemm") and b_name in inits
                    and is_float(first_in) and inits[b_name].data_type == _F32):
                x_scale = np.float64(params[first_in][2])
                w_scale = weight(n, bias_floor(n, b_name, x_scale))
                quantized_bias(n, b_name, w_scale, x_scale)
            else:
                weight(n)
        if inputs_only:
            continue        # the output stays float; a quantized reader quantizes it as its input
        # the output: the op writes y|f and its Q writes y|q8; quantized readers take their own DQ
        y = n.output[0]
        s_, z_, _ = qparams(y, first_in if n.op_type in _SHARE_SCALE else None)
        raw = derived(y, "f")
        n.output[0] = raw
        q_of[y] = derived(y, "q8")
        after[id(n)].append(helper.make_node("QuantizeLinear", [raw, s_, z_], [q_of[y]], name=derived(y, "q")))
        if y in graph_outputs or any(id(c) not in chosen_ids or id(c) in folded for c in consumers[y]):
            # float readers (and the graph output) read y back in fp32, under its own name
            after[id(n)].append(helper.make_node("DequantizeLinear", [q_of[y], s_, z_], [y], name=derived(y, "dq")))

    commit_rewrite(g, new_inits, head=head, before=before, after=after, drop=folded)
    return out          # value_info dropped: shapes are inferred where they are needed
