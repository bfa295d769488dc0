"""Keras' `implementation=1` cells as TF 2 writes them and tf2onnx keeps them: every gate its own
MatMul of the step input with a cut of the kernel and of the state with a cut of the recurrent
kernel, the bias cut per gate, and inference-time dropout as a Mul by ones_like (Expand of
`ones` to the shape of what it multiplies). `ones` other than 1.0 writes a dropout that is not
the identity (a body the recurrent action must refuse). Used by keras_rnn.py."""
from __future__ import annotations

import numpy as np


def _cut(b, w: str, lo: int, hi: int, axis: int) -> str:
    c = lambda v: b.const([v], np.int64)
    return b.one("Slice", w, c(lo), c(hi), c(axis))


def _dropped(b, v: str, ones: float | None) -> str:
    """v·ones_like(v) (Keras' dropout mask at inference), or v when no dropout is written."""
    if ones is None:
        return v
    shape = b.one("Cast", b.one("Cast", b.one("Shape", v), to=6), to=7)     # tf2onnx's int32 round trip
    return b.one("Mul", v, b.one("Expand", b.const(ones), shape))


def _gate_inputs(b, x: str, h: str, w: dict, hidden: int, gates: int, ones: float | None):
    """Per gate: x·W_g + b_g, and the (dropped-out) state the recurrent cut multiplies."""
    xs = []
    for g in range(gates):
        lo, hi = g * hidden, (g + 1) * hidden
        xg = b.one("MatMul", _dropped(b, x, ones), _cut(b, w["kernel"], lo, hi, 1))
        xs.append(b.one("Add", xg, _cut(b, w["bias"], lo, hi, 0)))
    return xs, [_dropped(b, h, ones) for _ in range(gates)]


def lstm(b, x: str, h: str, c: str, w: dict, hidden: int, act: str, ract: str, ones: float | None) -> tuple[str, str]:
    (xi, xf, xc, xo), (hi_, hf, hc, ho) = _gate_inputs(b, x, h, w, hidden, 4, ones)
    rec = lambda v, k: b.one("MatMul", v, _cut(b, w["recurrent"], k * hidden, (k + 1) * hidden, 1))
    i = b.act(b.one("Add", xi, rec(hi_, 0)), ract)
    f = b.act(b.one("Add", xf, rec(hf, 1)), ract)
    c_new = b.one("Add", b.one("Mul", f, c), b.one("Mul", i, b.act(b.one("Add", xc, rec(hc, 2)), act)))
    o = b.act(b.one("Add", xo, rec(ho, 3)), ract)
    return b.one("Mul", o, b.act(c_new, act)), c_new


def gru(b, x: str, h: str, w: dict, hidden: int, act: str, ract: str, ones: float | None) -> str:
    """reset_after=False (Keras 2.0's GRU): hh = act(x·W_h + b_h + (r·h)·R_h)."""
    (xz, xr, xh), (hz, hr, hh_) = _gate_inputs(b, x, h, w, hidden, 3, ones)
    rec = lambda v, k: b.one("MatMul", v, _cut(b, w["recurrent"], k * hidden, (k + 1) * hidden, 1))
    z = b.act(b.one("Add", xz, rec(hz, 0)), ract)
    r = b.act(b.one("Add", xr, rec(hr, 1)), ract)
    hh = b.act(b.one("Add", xh, rec(b.one("Mul", r, hh_), 2)), act)
    return b.one("Add", b.one("Mul", z, h), b.one("Mul", b.one("Sub", b.const(1.0), z), hh))
