"""The QDQ rewrite (the form the package's docstring describes): which ops are quantized, the
Q/DQ nodes and int8/int32 constants written for each, each once however many readers."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx
from onnx import helper, numpy_helper

from metainfer_core.actions.base import commit_rewrite, derived, infos_of, opset_of, wiring
from metainfer_core.actions.qdq.calibration import RangeTable
from metainfer_core.actions.qdq.params import act_params, concat_act_params, symmetric_act_params, weight_axis, weight_quant
from metainfer_core.ir.graph_utils import clone, node_reads

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


def quantize(model: onnx.ModelProto, node_names: set[str] | list[str] | tuple[str, ...], table: RangeTable,
             activation_type: str = "QUInt8", weight_type: str = "QInt8", per_channel: bool | str = True,
             placement: str = "inputs_outputs") -> onnx.ModelProto:
    """The graph with the named nodes (those of a quantizable type) in QDQ int8; weight scales
    per channel, per tensor, or "auto" (weight_axis); `placement` as in the package's docstring."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement {placement!r}: use one of {list(PLACEMENTS)}")
    return _Rewrite(model, set(node_names), table, activation_type, weight_type, per_channel, placement).run()


class _Rewrite:
    """One quantize() call: the graph being rewritten, what each op of it becomes, and the
    Q/DQ nodes and constants written so far (each written once, however many readers)."""

    def __init__(self, model: onnx.ModelProto, wanted: set[str], table: RangeTable, activation_type: str,
                 weight_type: str, per_channel: bool | str, placement: str):
        self.model, self.table = model, table
        self.activation_type, self.weight_type, self.per_channel = activation_type, weight_type, per_channel
        self.inputs_only = placement == "inputs"
        self.out = clone(model)
        g = self.g = self.out.graph
        self.infos = infos_of(model)
        self.inits = {i.name: i for i in g.initializer}
        self.graph_outputs = {o.name for o in g.output}
        # an op whose output a subgraph (an If branch) reads stays float: a fold would rename that
        # output, and ONNX Runtime's QDQ fusion aborts the process on a DequantizeLinear read there
        read_inside = {t for n in g.node for t in node_reads(n) - set(n.input)}
        self.opset = opset_of(model)
        if per_channel is True and self.opset < 13:
            raise ValueError(f"per-channel quantization needs opset >= 13 (graph has {self.opset})")
        ops = ALL_OPS + (INPUTS_ONLY_OPS if self.inputs_only else ())
        self.weighted = COMPUTE_OPS + (INPUTS_ONLY_OPS if self.inputs_only else ())
        self.chosen = [n for n in g.node if n.name in wanted and n.op_type in ops and len(n.output) == 1
                       and self.is_float(n.output[0]) and n.output[0] not in read_inside
                       and any(self.is_float(i) for i in n.input)]
        self.chosen_ids = {id(n) for n in self.chosen}
        self.producer, self.consumers = wiring(g)
        self.folded: set[int] = set()      # Relu/Clip right after a quantized op: its output Q computes them
        self.axes: dict[str, int | None] = {}
        self.new_inits: list[onnx.TensorProto] = []
        self.before: dict[int, list[onnx.NodeProto]] = defaultdict(list)
        self.after: dict[int, list[onnx.NodeProto]] = defaultdict(list)
        self.head: list[onnx.NodeProto] = []
        self.params: dict[str, tuple[str, str, np.ndarray]] = {}    # tensor -> scale name, zp name, scale value
        self.q_of: dict[str, str] = {}                              # activation -> its int8 tensor
        self.dq_for: dict[tuple[str, int], str] = {}
        self.weight_dq: dict[str, tuple[str, np.ndarray]] = {}
        self.through: set[int] = set()     # ops a quantizer was lifted through (once, for all their readers)
        self.group: dict[str, str] = {}    # a Concat's inputs: one scale (see share_concat_scales)

    def is_float(self, t: str) -> bool:
        return t in self.infos and self.infos[t].dtype == np.float32 and t not in self.inits

    def run(self) -> onnx.ModelProto:
        self.fold_activations()
        self.table.ensure(self.model, [t for n in self.chosen
                                       for t in list(n.input) + ([] if self.inputs_only else list(n.output))
                                       if self.is_float(t)])
        self.share_concat_scales()
        for n in self.chosen:
            self.rewrite(n)
        commit_rewrite(self.g, self.new_inits, head=self.head, before=self.before, after=self.after,
                       drop=self.folded)
        return self.out          # value_info dropped: shapes are inferred where they are needed

    def fold_activations(self) -> None:
        for n in self.chosen:
            p = self.producer.get(n.input[0])
            if (not self.inputs_only and n.op_type in _FOLDABLE and p is not None and id(p) in self.chosen_ids
                    and p.op_type not in _FOLDABLE and len(self.consumers[n.input[0]]) == 1
                    and n.input[0] not in self.graph_outputs and all(i == "" or i in self.inits for i in n.input[1:])):
                self.folded.add(id(n))
                p.output[0] = n.output[0]
        self.chosen = [n for n in self.chosen if id(n) not in self.folded]

    # --- constants and parameters -------------------------------------------------------------
    def const(self, name: str, arr: np.ndarray) -> str:
        self.new_inits.append(numpy_helper.from_array(arr, name))
        return name

    def axis_of(self, n: onnx.NodeProto) -> int | None:
        """The node's weight scale axis, decided once per weight (a shared weight is quantized once)."""
        if n.input[1] not in self.axes:
            self.axes[n.input[1]] = weight_axis(n, numpy_helper.to_array(self.inits[n.input[1]]), self.per_channel,
                                                self.opset)
        return self.axes[n.input[1]]

    def qparams(self, t: str, share_from: str | None = None) -> tuple[str, str, np.ndarray]:
        if t not in self.params:
            if share_from is not None and share_from in self.params:
                self.params[t] = self.params[share_from]
            else:
                r = self.table.lookup(t)
                if r is None:
                    self.table.ensure(self.model, [t])        # a tensor a quantizer was lifted to
                    r = self.table.lookup(t)
                if r is None:
                    raise ValueError(f"no calibrated range for tensor {t!r}")
                s, z = symmetric_act_params(r) if self.inputs_only else act_params(r, self.activation_type)
                self.params[t] = (self.const(derived(t, "scale"), s), self.const(derived(t, "zp"), z), s)
        return self.params[t]

    # --- activations ----------------------------------------------------------------------------
    def quantized(self, t: str) -> str:
        """t's QuantizeLinear, placed right after t's producer (the graph start for an input)."""
        if t not in self.q_of:
            s_, z_, _ = self.qparams(t)
            self.q_of[t] = derived(t, "q8")
            p = self.producer.get(t)
            (self.after[id(p)] if p is not None else self.head).append(
                helper.make_node("QuantizeLinear", [t, s_, z_], [self.q_of[t]], name=derived(t, "q")))
        return self.q_of[t]

    def dequantized(self, t: str, reader: onnx.NodeProto) -> str:
        """A DequantizeLinear of t for this reader alone, right before it: a QDQ runtime folds
        it into the reader's integer kernel, so only the int8 tensor stays alive between kernels
        (ONNX Runtime's DedicatedQDQPair)."""
        if (t, id(reader)) not in self.dq_for:
            q = self.quantized(t)
            s_, z_, _ = self.params[t]
            dst = derived(t, f"dq.{reader.name}")
            self.before[id(reader)].append(helper.make_node("DequantizeLinear", [q, s_, z_], [dst], name=dst))
            self.dq_for[(t, id(reader))] = dst
        return self.dq_for[(t, id(reader))]

    def liftable(self, p: onnx.NodeProto | None, t: str) -> bool:
        return (self.inputs_only and p is not None and p.op_type in _PRESERVING | {"Concat"}
                and id(p) not in self.chosen_ids and t not in self.graph_outputs
                and all(id(c) in self.chosen_ids for c in self.consumers[t]))

    def root(self, t: str) -> str:
        while self.group.get(t, t) != t:
            t = self.group[t]
        return t

    def share_concat_scales(self) -> None:
        """A Concat's inputs share one scale (OpenVINO concatenates int8 data only when they do):
        the union of their ranges, grouped before any of them is quantized for another reader."""
        concats = [n for n in self.g.node if self.inputs_only and n.op_type == "Concat"
                   and all(self.is_float(i) for i in n.input)
                   and (id(n) in self.chosen_ids or self.liftable(n, n.output[0]))]
        for n in concats:
            for i in n.input[1:]:
                self.group[self.root(i)] = self.root(n.input[0])
        if not concats:
            return
        members = defaultdict(list)
        for t in {i for n in concats for i in n.input}:
            members[self.root(t)].append(t)
        self.table.ensure(self.model, [t for ts in members.values() for t in ts])
        for ts in members.values():
            rs = [self.table.lookup(t) for t in ts]
            s_, z_ = concat_act_params((min(r[0] for r in rs), max(r[1] for r in rs)))
            shared = (self.const(derived(ts[0], "scale"), s_), self.const(derived(ts[0], "zp"), z_), s_)
            for t in ts:
                self.params[t] = shared

    def lifted(self, t: str, reader: onnx.NodeProto, slot: int) -> None:
        """Under placement "inputs", a quantizer for what `reader` reads moves up through the
        ops that only move or select values (MaxPool, Resize, ...) when every reader of their
        output is quantized: OpenVINO then runs those ops on int8 data too (NNCF's quantizer
        propagation); through a Concat, each of its inputs is quantized, with one scale."""
        p = self.producer.get(t)
        if self.liftable(p, t):
            slots = range(len(p.input)) if p.op_type == "Concat" else (0,)
            if id(p) not in self.through and all(self.is_float(p.input[i]) for i in slots):
                self.through.add(id(p))
                if p.op_type != "Concat" and t in self.params and p.input[0] not in self.params:
                    self.params[p.input[0]] = self.params[t]      # a Concat input's shared scale moves up with it
                for i in slots:
                    self.lifted(p.input[i], p, i)
            if id(p) in self.through:
                return
        reader.input[slot] = self.dequantized(t, reader)

    # --- weights and biases ---------------------------------------------------------------------
    def weight(self, n: onnx.NodeProto, min_scale: np.ndarray | None = None) -> np.ndarray:
        """Route the node's weight through int8 storage and a DQ; returns its scale."""
        w_name = n.input[1]
        if w_name not in self.weight_dq:
            w = numpy_helper.to_array(self.inits[w_name])
            axis = self.axis_of(n)
            q, s, z = weight_quant(w, axis, self.weight_type, min_scale)
            extra = {"axis": axis} if axis is not None else {}
            w_dq = derived(w_name, "dq")
            self.before[id(n)].append(helper.make_node(
                "DequantizeLinear", [self.const(derived(w_name, "int8"), q), self.const(derived(w_name, "scale"), s),
                                     self.const(derived(w_name, "zp"), z)], [w_dq], name=w_dq, **extra))
            self.weight_dq[w_name] = (w_dq, s)
        n.input[1] = self.weight_dq[w_name][0]
        return self.weight_dq[w_name][1]

    def bias_floor(self, n: onnx.NodeProto, b_name: str, x_scale: np.float64) -> np.ndarray:
        """The smallest weight scale per output channel that keeps round(bias / (input scale x
        weight scale)) inside int32. It only binds for a near-zero weight channel beside a real
        bias (some detectors have them), whose weights then quantize to zero: a 1e-12 error
        instead of a wrapped int32 bias."""
        b = np.abs(numpy_helper.to_array(self.inits[b_name]).astype(np.float64))
        floor = b / (x_scale * _BIAS_LIMIT)
        return floor if self.axis_of(n) is not None else floor.max(initial=0.0)

    def quantized_bias(self, n: onnx.NodeProto, b_name: str, w_scale: np.ndarray, x_scale: np.float64) -> None:
        """int32 bias through a DQ: scale = input scale x weight scale (per channel)."""
        b = numpy_helper.to_array(self.inits[b_name]).astype(np.float64)
        bs = x_scale * w_scale.astype(np.float64) * np.ones_like(b)
        # clipped only when a shared weight was quantized for another node's bias first
        bq = np.clip(np.round(b / bs), -_BIAS_LIMIT, _BIAS_LIMIT).astype(np.int32)
        b_dq = derived(b_name, f"dq.{n.name}")
        self.before[id(n)].append(helper.make_node(
            "DequantizeLinear", [self.const(derived(b_name, f"int32.{n.name}"), bq),
                                 self.const(derived(b_name, f"scale.{n.name}"), bs.astype(np.float32)),
                                 self.const(derived(b_name, f"zp.{n.name}"), np.zeros_like(bq))],
            [b_dq], name=b_dq, axis=0))
        n.input[2] = b_dq

    # --- one op ---------------------------------------------------------------------------------
    def rewrite(self, n: onnx.NodeProto) -> None:
        first_in = n.input[0]
        for slot, t in enumerate(list(n.input)):
            if t and self.is_float(t):
                self.lifted(t, n, slot)
        if n.op_type in self.weighted and len(n.input) > 1 and n.input[1] in self.inits \
                and self.inits[n.input[1]].data_type == _F32:
            b_name = n.input[2] if len(n.input) > 2 else ""
            # an int32 bias is per output channel: a Gemm's 2-D C (1 x N, broadcast) stays float
            if (not self.inputs_only and n.op_type in ("Conv", "Gemm") and b_name in self.inits
                    and self.is_float(first_in) and self.inits[b_name].data_type == _F32
                    and len(self.inits[b_name].dims) == 1):
                x_scale = np.float64(self.params[first_in][2])
                w_scale = self.weight(n, self.bias_floor(n, b_name, x_scale))
                self.quantized_bias(n, b_name, w_scale, x_scale)
            else:
                self.weight(n)
        if self.inputs_only:
            return          # the output stays float; a quantized reader quantizes it as its input
        # the output: the op writes y|f and its Q writes y|q8; quantized readers take their own DQ
        y = n.output[0]
        s_, z_, _ = self.qparams(y, first_in if n.op_type in _SHARE_SCALE else None)
        raw = derived(y, "f")
        n.output[0] = raw
        self.q_of[y] = derived(y, "q8")
        self.after[id(n)].append(helper.make_node("QuantizeLinear", [raw, s_, z_], [self.q_of[y]], name=derived(y, "q")))
        if y in self.graph_outputs or any(id(c) not in self.chosen_ids or id(c) in self.folded
                                          for c in self.consumers[y]):
            # float readers (and the graph output) read y back in fp32, under its own name
            self.after[id(n)].append(helper.make_node("DequantizeLinear", [self.q_of[y], s_, z_], [y],
                                                      name=derived(y, "dq")))
