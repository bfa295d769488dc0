"""The cells a recurrent body may compute, proved from the body's dataflow (from the new states
back to the step input and the old states), and their weights in ONNX's layout and gate order.

- LSTM (Keras, tf2onnx): z = x·W + h·R + b cut into gates i, f, c, o; c' = f·c + i·g(z_c),
  h' = o·h(c'), the gates through one recurrent activation f. ONNX wants i, o, f, c.
- GRU: z, r, h gates in Keras' order and ONNX's; h' = z·h + (1 - z)·hh. Keras' reset_after=True
  (hh = g(x·W_h + b_xh + r·(h·R_h + b_hh))) is ONNX's linear_before_reset=1, reset_after=False
  (hh = g(x·W_h + (r·h)·R_h + b)) is 0.
- SimpleRNN: h' = f(x·W + h·R + b)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from metainfer_core.actions.recurrent.values import Act, Affine, Refused, Scope, activation, affine, operands

GATE_ACTS = ("Sigmoid", "HardSigmoid")      # what a gate (i, f, o; z, r) may squash with


@dataclass
class Cell:
    op: str                       # LSTM, GRU or RNN
    hidden: int
    W: np.ndarray                 # [1, gates * hidden, input]
    R: np.ndarray                 # [1, gates * hidden, hidden]
    B: np.ndarray                 # [1, 2 * gates * hidden]
    acts: tuple[Act, ...]         # ONNX's activations in its order: f, g, h (LSTM), f, g (GRU), f (RNN)
    h: str                        # the body's hidden state in and out
    h_out: str
    c: str = ""                   # the cell state (LSTM)
    c_out: str = ""
    linear_before_reset: int = 0


def _describe(scope: Scope, name: str) -> str:
    p = scope.producer.get(scope.strip(name))
    return f"{p.op_type} '{p.name or p.output[0]}'" if p is not None else f"'{name}'"


def _blocker(scope: Scope, name: str) -> str:
    """The first node on the way from `name` back that is not part of an affine form."""
    p = scope.producer.get(scope.strip(name))
    if p is None:
        return f"'{name}'"
    if p.op_type in ("Add", "Split", "Slice"):
        for i in p.input[:2] if p.op_type == "Add" else p.input[:1]:
            if scope.const(i) is None and affine(scope, i) is None:
                return _blocker(scope, i)
    return _describe(scope, name)


def _pre(scope: Scope, name: str, sources: set[str], what: str) -> Affine:
    a = affine(scope, name)
    if a is None:
        raise Refused(f"{what}'s input is not x·W + h·R + b ({_blocker(scope, name)} in it: a peephole or another term)")
    if set(a.terms) != sources:
        extra = sorted(set(a.terms) - sources)
        if extra:
            raise Refused(f"{what} reads {', '.join(map(repr, extra))} beside the step input and the state "
                          "(a dropout mask or another input)")
        raise Refused(f"{what} does not read {', '.join(map(repr, sorted(sources - set(a.terms))))}")
    return a


def _gate(scope: Scope, name: str, x: str, h: str, what: str, acts=GATE_ACTS) -> tuple[Act, Affine]:
    found = activation(scope, name)
    if found is None or found[0].op not in acts:
        raise Refused(f"{what} is not squashed by {' or '.join(acts)} ({_describe(scope, name)}: a custom activation)")
    return found[0], _pre(scope, found[1], {x, h}, what)


def _pick(scope: Scope, pair: tuple[str, str], act: Act) -> tuple[str, str]:
    """(the gate, the other factor) of a product of a gate and something else: the gate is the
    factor squashed like the other gates (either, when both are: the product is the same)."""
    p, q = pair
    found = activation(scope, q)
    return (q, p) if found is not None and found[0] == act and (activation(scope, p) or (None,))[0] != act else (p, q)


def _mul(scope: Scope, name: str, what: str) -> onnx.NodeProto:
    node = scope.node(name, "Mul")
    if node is None:
        raise Refused(f"{what} is not a product ({_describe(scope, name)})")
    return node


def _same(act: Act, *others: Act, what: str) -> None:
    if any(o != act for o in others):
        raise Refused(f"{what} do not share one recurrent activation (ONNX applies one to all)")


def lstm(scope: Scope, x: str, states: list[str], outs: dict[str, str]) -> Cell:
    kinds = {s: getattr(scope.producer.get(scope.strip(outs[s])), "op_type", None) for s in states}
    c = next((s for s in states if kinds[s] == "Add"), None)
    h = next((s for s in states if kinds[s] == "Mul"), None)
    if c is None or h is None:
        raise Refused("the two states are not an LSTM's (h' = o·tanh(c'), c' = f·c + i·g)")
    fc, ig = _split_on(scope, scope.node(outs[c], "Add"), c, "a term of the cell state's update",
                       "the cell state's update does not read the previous cell state (f·c + i·g)")
    a, b = operands(scope, fc)
    f_act, f = _gate(scope, b if a == c else a, x, h, "the forget gate")
    i_name, g_name = _pick(scope, operands(scope, ig), f_act)
    i_act, i = _gate(scope, i_name, x, h, "the input gate")
    g_act, g = _gate(scope, g_name, x, h, "the cell candidate", acts=("Tanh", "Relu", "Sigmoid", "HardSigmoid"))
    out = _mul(scope, outs[h], "the new hidden state")
    o_name = None
    for k in (0, 1):
        found = activation(scope, out.input[k])
        if found is not None and found[1] == scope.strip(outs[c]):
            h_act, o_name = found[0], out.input[1 - k]
            break
    if o_name is None:
        raise Refused("the new hidden state does not read the new cell state (h' = o·tanh(c'))")
    o_act, o = _gate(scope, o_name, x, h, "the output gate")
    _same(i_act, f_act, o_act, what="the input, forget and output gates")
    gates = (i, o, f, g)                                   # ONNX's order
    return Cell("LSTM", _hidden(gates, x, h), _stack(gates, x), _stack(gates, h),
                np.concatenate([*(a.bias for a in gates), np.zeros(4 * i.width, np.float32)])[None],
                (i_act, g_act, h_act), h, outs[h], c, outs[c])


def gru(scope: Scope, x: str, h: str, h_out: str) -> Cell:
    zh, rest = _split_on(scope, scope.node(h_out, "Add"), h, "a term of the new state",
                         "the new state does not read the old one (h' = z·h + (1 - z)·hh)")
    a, b = operands(scope, zh)
    z_name = b if a == h else a
    hh_name = None
    for k in (0, 1):
        sub = scope.node(rest.input[k], "Sub")
        if sub is not None and scope.scalar(sub.input[0]) == 1.0 and scope.strip(sub.input[1]) == z_name:
            hh_name = rest.input[1 - k]
    if hh_name is None:
        raise Refused("the new state is not z·h + (1 - z)·hh")
    z_act, z = _gate(scope, z_name, x, h, "the update gate")
    found = activation(scope, hh_name)
    if found is None:
        raise Refused(f"the candidate state is not squashed by an activation ONNX's GRU takes ({_describe(scope, hh_name)})")
    g_act, pre = found
    whole = affine(scope, pre)
    if whole is not None:                                  # reset_after=False: hh = g(x·W + (r·h)·R + b)
        rh = next((s for s in whole.terms if s != x), None)
        mul = scope.node(rh, "Mul") if rh else None
        if mul is None or h not in operands(scope, mul):
            raise Refused("the candidate state's recurrent term is not (r·h)·R")
        a, b = operands(scope, mul)
        r_act, r = _gate(scope, b if a == h else a, x, h, "the reset gate")
        hx = _pre(scope, pre, {x, rh}, "the candidate state")
        wh, rh_w, bx, bh, lbr = hx.terms[x], hx.terms[rh], hx.bias, np.zeros_like(hx.bias), 0
    else:                                                  # reset_after=True: hh = g(x·W + b + r·(h·R + b'))
        top = scope.node(pre, "Add")
        if top is None:
            raise Refused(f"the candidate state's input is neither x·W + (r·h)·R + b nor x·W + r·(h·R + b) "
                          f"({_describe(scope, pre)})")
        for k in (0, 1):
            mul = scope.node(top.input[k], "Mul")
            if mul is not None:
                break
        if mul is None:
            raise Refused("the candidate state's input has no r·(h·R + b) term")
        hx = _pre(scope, top.input[1 - k], {x}, "the candidate state's input term")
        r_name, inner = _pick(scope, operands(scope, mul), z_act)
        r_act, r = _gate(scope, r_name, x, h, "the reset gate")
        hr = _pre(scope, inner, {h}, "the candidate state's recurrent term")
        wh, rh_w, bx, bh, lbr = hx.terms[x], hr.terms[h], hx.bias, hr.bias, 1
    _same(z_act, r_act, what="the update and reset gates")
    cand = Affine({x: wh, h: rh_w}, bx)
    gates = (z, r, cand)
    hidden = _hidden(gates, x, h)
    zeros = np.zeros(hidden, np.float32)
    return Cell("GRU", hidden, _stack(gates, x), _stack(gates, h),
                np.concatenate([z.bias, r.bias, bx, zeros, zeros, bh])[None], (z_act, g_act), h, h_out,
                linear_before_reset=lbr)


def rnn(scope: Scope, x: str, h: str, h_out: str) -> Cell:
    act, a = _gate(scope, h_out, x, h, "the new state", acts=("Tanh", "Relu", "Sigmoid", "HardSigmoid"))
    hidden = _hidden((a,), x, h)
    return Cell("RNN", hidden, a.terms[x].T[None], a.terms[h].T[None],
                np.concatenate([a.bias, np.zeros(hidden, np.float32)])[None], (act,), h, h_out)


def match_cell(scope: Scope, x: str, states: list[str], outs: dict[str, str]) -> Cell:
    """The cell the body computes on step input `x` and carried `states` (outs: their new values)."""
    for s in states:
        if getattr(scope.producer.get(scope.strip(outs[s])), "op_type", None) == "Where":
            raise Refused(f"the state {s!r} is kept where a mask says so (Where): masked steps are not rewritten")
    if len(states) == 2:
        return lstm(scope, x, states, outs)
    if len(states) != 1:
        raise Refused(f"the loop carries {len(states)} states beside its counters (a cell carries 1 or 2)")
    h = states[0]
    p = scope.producer.get(scope.strip(outs[h]))
    if p is not None and p.op_type == "Add":
        return gru(scope, x, h, outs[h])
    return rnn(scope, x, h, outs[h])


def _split_on(scope: Scope, add, state: str, what: str, refusal: str):
    """The two products an Add sums: (the one reading `state`, the other)."""
    first, second = (_mul(scope, t, what) for t in add.input)
    if state not in operands(scope, first):
        first, second = second, first
    if state not in operands(scope, first):
        raise Refused(refusal)
    return first, second


def _hidden(gates, x: str, h: str) -> int:
    hidden = gates[0].width
    for g in gates:
        if g.width != hidden or g.terms[h].shape != (hidden, hidden) or g.terms[x].shape[0] != gates[0].terms[x].shape[0]:
            raise Refused("the gates' weights do not agree on one hidden size")
    return hidden


def _stack(gates, source: str) -> np.ndarray:
    return np.ascontiguousarray(np.concatenate([g.terms[source].T for g in gates])[None]).astype(np.float32)
