"""What the values of a recurrent body are: constants (the body's own, or the outer graph's that it
reads), affine forms (a sum of MatMul/Gemm by constant weights plus a constant bias, through the
Split and Slice that cut a fused gate matrix into gates, or of constant weights cut per gate) and
the activations ONNX's recurrent operators take; a Mul by provable ones (inference-time dropout) is
the value it multiplies. Everything here proves a value's form from the graph, or answers None."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from metainfer_core.ir.graph_utils import attr_value, node_reads


class Refused(Exception):
    """A loop this family leaves alone; the message is the one-line reason the search logs."""


class Scope:
    """Producers, consumers and constants of one graph; a body's scope sees its outer graph's
    constants behind its own. `used` collects the nodes a proof went through."""

    def __init__(self, graph: onnx.GraphProto, outer: "Scope | None" = None):
        self.graph, self.outer = graph, outer
        self.producer = {o: n for n in graph.node for o in n.output if o}
        self.consumers: defaultdict[str, list[onnx.NodeProto]] = defaultdict(list)
        for n in graph.node:
            for name in node_reads(n):
                self.consumers[name].append(n)
        self.inits = {t.name: t for t in graph.initializer}
        self.inputs = {i.name for i in graph.input}
        self.used: set[int] = set()
        self.aliases: dict[str, str] = {}     # a carried value passed through unchanged -> its outer initial value

    def defines(self, name: str) -> bool:
        return name in self.producer or name in self.inits or name in self.inputs

    def strip(self, name: str) -> str:
        """The tensor behind Identity nodes and Muls by provable ones (inference-time dropout:
        x·1 is x exactly); they are recorded as used."""
        while (p := self.producer.get(name)) is not None:
            if p.op_type == "Identity":
                self.used.add(id(p))
                name = p.input[0]
            elif p.op_type == "Mul" and (kept := times_ones(self, p)) is not None:
                name = kept
            else:
                break
        return name

    def node(self, name: str, *ops: str) -> onnx.NodeProto | None:
        """The producer of `name` (behind Identity) when it is one of `ops`, recorded as used."""
        p = self.producer.get(self.strip(name))
        if p is None or p.op_type not in ops or p.domain not in ("", "ai.onnx"):
            return None
        self.used.add(id(p))
        return p

    def const(self, name: str) -> np.ndarray | None:
        if not name:
            return None
        if name in self.inits:
            return numpy_helper.to_array(self.inits[name])
        p = self.producer.get(name)
        if p is not None:
            if p.op_type == "Identity":
                return self.const(p.input[0])
            if p.op_type == "Constant":
                return _constant_value(p)
            if p.op_type in ("Slice", "Split"):      # a per-gate cell cuts its weights in the body
                value = _cut(self, p, name)
                if value is not None:
                    self.used.add(id(p))
                return value
            return None
        if name in self.aliases and self.outer is not None:
            return self.outer.const(self.aliases[name])
        if name in self.inputs or self.outer is None:
            return None
        return self.outer.const(name)

    def scalar(self, name: str) -> float | None:
        v = self.const(name)
        return float(v.reshape(-1)[0]) if v is not None and v.size == 1 else None


def _cut(scope: Scope, node: onnx.NodeProto, name: str) -> np.ndarray | None:
    """A Slice or Split of a constant (opset 10+ inputs, or 13+ split sizes), evaluated."""
    whole = scope.const(node.input[0])
    if whole is None:
        return None
    if node.op_type == "Slice":
        if len(node.input) < 3:
            return None
        names = list(node.input) + [""] * (5 - len(node.input))
        starts, ends, axes, steps = (scope.const(i) for i in names[1:5])
        if starts is None or ends is None or (names[3] and axes is None) or (names[4] and steps is None):
            return None
        axes = range(len(starts)) if axes is None else axes
        steps = [1] * len(starts) if steps is None else steps
        index = [slice(None)] * whole.ndim
        for a, lo, hi, st in zip(axes, starts, ends, steps):
            index[int(a)] = slice(*slice(int(lo), int(hi), int(st)).indices(whole.shape[int(a)]))
        return whole[tuple(index)]
    axis = int(attr_value(node, "axis", 0))
    sizes = _split_sizes(scope, node, whole.shape[axis])
    if sizes is None:
        return None
    bounds = np.cumsum([0, *sizes])
    k = list(node.output).index(name)
    return np.take(whole, range(bounds[k], bounds[k + 1]), axis=axis)


def _ones(scope: Scope, name: str, other: str) -> bool:
    """Whether `name` is all ones and multiplying `other` by it keeps other's shape: a constant of
    ones with every dim 1, or ones Expanded to (ConstantOfShape of) Shape(other) itself, the way
    Keras' ones_like writes a dropout mask at inference."""
    value = scope.const(name)
    if value is not None:
        return value.dtype == np.float32 and value.ndim <= 2 and value.size == 1 and bool((value == 1).all())
    p = scope.producer.get(name)
    if p is None or p.op_type not in ("Expand", "ConstantOfShape") or p.domain not in ("", "ai.onnx"):
        return False
    if p.op_type == "Expand":
        one, shape_of = scope.const(p.input[0]), p.input[1]
    else:
        v = attr_value(p, "value")
        one, shape_of = (numpy_helper.to_array(v) if v is not None else None), p.input[0]
    if one is None or one.dtype != np.float32 or one.size != 1 or one.ndim > 1 or float(one.reshape(-1)[0]) != 1.0:
        return False
    chain = []
    while (q := scope.producer.get(shape_of)) is not None and q.op_type in ("Cast", "Identity"):
        chain.append(q)
        shape_of = q.input[0]
    shape = scope.producer.get(shape_of)
    if shape is None or shape.op_type != "Shape" or shape.attribute or shape.input[0] != other:
        return False
    scope.used.update(id(n) for n in (p, shape, *chain))
    return True


def times_ones(scope: Scope, mul: onnx.NodeProto) -> str | None:
    """The other factor of a Mul by ones (recorded as used), or None."""
    if mul.domain not in ("", "ai.onnx") or len(mul.input) != 2:
        return None
    for k in (0, 1):
        if scope.const(mul.input[k]) is None and _ones(scope, mul.input[1 - k], mul.input[k]):
            scope.used.add(id(mul))
            return mul.input[k]
    return None


def _constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    for a in node.attribute:
        if a.name == "value":
            return numpy_helper.to_array(a.t)
        if a.name in ("value_float", "value_int"):
            return np.array(onnx.helper.get_attribute_value(a))
        if a.name in ("value_floats", "value_ints"):
            return np.array(list(onnx.helper.get_attribute_value(a)))
    return None


@dataclass
class Affine:
    """sum over sources of source @ terms[source], plus bias: a gate's pre-activation."""
    terms: dict[str, np.ndarray]         # source tensor -> weight [in, out]
    bias: np.ndarray                     # [out]
    width: int = field(init=False)

    def __post_init__(self):
        self.width = int(self.bias.shape[0])

    def cols(self, lo: int, hi: int) -> "Affine":
        return Affine({s: w[:, lo:hi] for s, w in self.terms.items()}, self.bias[lo:hi])

    def plus(self, other: "Affine") -> "Affine | None":
        if other.width != self.width:
            return None
        terms = dict(self.terms)
        for s, w in other.terms.items():
            if s in terms and terms[s].shape != w.shape:
                return None
            terms[s] = terms[s] + w if s in terms else w
        return Affine(terms, self.bias + other.bias)


def _bias(value: np.ndarray | None) -> np.ndarray | None:
    """A constant an Add may fold into a bias: one value per output column ([out] or [1, out])."""
    if value is None or value.dtype != np.float32 or value.ndim not in (1, 2) or (value.ndim == 2 and value.shape[0] != 1):
        return None
    return value.reshape(-1)


def affine(scope: Scope, name: str) -> Affine | None:
    """The affine form of a rank-2 value [batch, out] (None when it is not one)."""
    p = scope.node(name, "MatMul", "Gemm", "Add", "Split", "Slice")
    if p is None:
        return None
    if p.op_type == "MatMul":
        w = scope.const(p.input[1])
        if w is None or w.dtype != np.float32 or w.ndim != 2 or scope.const(p.input[0]) is not None:
            return None
        return Affine({scope.strip(p.input[0]): w}, np.zeros(w.shape[1], np.float32))
    if p.op_type == "Gemm":
        w = scope.const(p.input[1])
        if w is None or w.dtype != np.float32 or w.ndim != 2 or attr_value(p, "transA", 0):
            return None
        w = (w.T if attr_value(p, "transB", 0) else w) * np.float32(attr_value(p, "alpha", 1.0))
        bias = np.zeros(w.shape[1], np.float32)
        if len(p.input) > 2 and p.input[2]:
            c = _bias(scope.const(p.input[2]))
            if c is None or c.size not in (1, w.shape[1]):
                return None
            bias = bias + np.float32(attr_value(p, "beta", 1.0)) * c
        return Affine({scope.strip(p.input[0]): w}, bias)
    if p.op_type == "Add":
        parts = [_bias(scope.const(i)) for i in p.input]
        if all(b is None for b in parts):
            a, b = affine(scope, p.input[0]), affine(scope, p.input[1])
            return a.plus(b) if a is not None and b is not None else None
        if all(b is not None for b in parts):
            return None
        value = affine(scope, p.input[0] if parts[0] is None else p.input[1])
        bias = parts[1] if parts[0] is None else parts[0]
        if value is None or bias.size != value.width:
            return None
        return Affine(value.terms, value.bias + bias)
    whole = affine(scope, p.input[0])
    if whole is None:
        return None
    span = _split_span(scope, p, name, whole.width) if p.op_type == "Split" else _slice_span(scope, p, whole.width)
    return None if span is None else whole.cols(*span)


def _split_sizes(scope: Scope, node: onnx.NodeProto, width: int) -> list[int] | None:
    """A Split's part sizes along an axis `width` long (its attribute, its constant input, or
    equal parts), or None where they are not known or do not add up to `width`."""
    sizes = attr_value(node, "split")
    if sizes is None and len(node.input) > 1 and node.input[1]:
        sizes = scope.const(node.input[1])
        if sizes is None:
            return None
    parts = len(node.output)
    if sizes is None:
        if width % parts:
            return None
        sizes = [width // parts] * parts
    sizes = [int(v) for v in sizes]
    return sizes if sum(sizes) == width else None


def _split_span(scope: Scope, node: onnx.NodeProto, name: str, width: int) -> tuple[int, int] | None:
    if attr_value(node, "axis", 0) not in (1, -1):
        return None
    sizes = _split_sizes(scope, node, width)
    if sizes is None:
        return None
    k = list(node.output).index(scope.strip(name))
    lo = sum(sizes[:k])
    return lo, lo + sizes[k]


def _slice_span(scope: Scope, node: onnx.NodeProto, width: int) -> tuple[int, int] | None:
    if len(node.input) < 3:         # opset < 10: attributes
        starts, ends, axes, steps = attr_value(node, "starts"), attr_value(node, "ends"), attr_value(node, "axes"), None
    else:
        starts, ends = scope.const(node.input[1]), scope.const(node.input[2])
        axes = scope.const(node.input[3]) if len(node.input) > 3 and node.input[3] else None
        steps = scope.const(node.input[4]) if len(node.input) > 4 and node.input[4] else None
        if starts is None or ends is None or (len(node.input) > 3 and node.input[3] and axes is None) \
                or (len(node.input) > 4 and node.input[4] and steps is None):
            return None
    if starts is None or len(starts) != 1 or axes is None or [int(a) for a in axes] not in ([1], [-1]):
        return None
    if steps is not None and [int(s) for s in steps] != [1]:
        return None
    lo, hi, _ = slice(int(starts[0]), int(ends[0])).indices(width)
    return (lo, hi) if hi > lo else None


@dataclass(frozen=True)
class Act:
    """An activation as ONNX's recurrent operators name it (alpha/beta only where it takes them)."""
    op: str
    alpha: float | None = None
    beta: float | None = None


PLAIN = ("Sigmoid", "Tanh", "Relu")       # what the rewrite passes through (no alpha/beta needed)


def activation(scope: Scope, name: str) -> tuple[Act, str] | None:
    """(the activation, the tensor it reads) when `name` is an activation the recurrent operators
    take: Sigmoid, Tanh, Relu, HardSigmoid, or Keras' hard sigmoid spelt out (clip(a·x + b, 0, 1))."""
    saved = set(scope.used)
    p = scope.node(name, *PLAIN, "HardSigmoid", "Clip", "Max", "Min")
    if p is None:
        return None
    if p.op_type in PLAIN:
        return Act(p.op_type), scope.strip(p.input[0])
    if p.op_type == "HardSigmoid":
        return Act("HardSigmoid", float(attr_value(p, "alpha", 0.2)), float(attr_value(p, "beta", 0.5))), \
            scope.strip(p.input[0])
    found = _hard_sigmoid(scope, p)
    if found is None:
        scope.used = saved
    return found


def _clipped(scope: Scope, p: onnx.NodeProto) -> str | None:
    """x when p is clip(x, 0, 1) (Clip, or a Max/Min pair)."""
    if p.op_type == "Clip":
        lo = attr_value(p, "min") if len(p.input) == 1 else scope.scalar(p.input[1]) if len(p.input) > 1 else None
        hi = attr_value(p, "max") if len(p.input) == 1 else scope.scalar(p.input[2]) if len(p.input) > 2 else None
        return p.input[0] if (lo, hi) == (0.0, 1.0) else None
    bound, other = (0.0, "Min") if p.op_type == "Max" else (1.0, "Max")
    for k in (0, 1):
        if scope.scalar(p.input[1 - k]) == bound and (q := scope.node(p.input[k], other)) is not None:
            for j in (0, 1):
                if scope.scalar(q.input[1 - j]) == 1.0 - bound:
                    return q.input[j]
    return None


def _hard_sigmoid(scope: Scope, p: onnx.NodeProto) -> tuple[Act, str] | None:
    inner = _clipped(scope, p)
    add = scope.node(inner, "Add") if inner else None
    if add is None:
        return None
    for k in (0, 1):
        beta = scope.scalar(add.input[1 - k])
        mul = scope.node(add.input[k], "Mul") if beta is not None else None
        if mul is None:
            continue
        for j in (0, 1):
            alpha = scope.scalar(mul.input[1 - j])
            if alpha is not None and scope.const(mul.input[j]) is None:
                return Act("HardSigmoid", alpha, beta), scope.strip(mul.input[j])
    return None


def operands(scope: Scope, node: onnx.NodeProto) -> tuple[str, str]:
    return scope.strip(node.input[0]), scope.strip(node.input[1])
