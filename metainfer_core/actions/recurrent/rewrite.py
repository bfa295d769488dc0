"""A proved recurrence as ONNX's operator: the LSTM / GRU / RNN node on the time-major sequence, its
weights (already in ONNX's gate order, cells.py), and the Squeezes and Transposes that give the
loop's outputs back under their own names: every step's h [T, B, H] (or [B, T, H] for a Scan
stacking on axis 1), the last h and c [B, H]. The sequence length stays whatever the input's is."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from metainfer_core.actions.base import derived
from metainfer_core.actions.recurrent.loops import Recurrence


DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}


def _axes_op(op: str, x: str, out: str, axes: list[int], opset: int, name: str, inits: list) -> onnx.NodeProto:
    """Squeeze / Unsqueeze with its axes as the opset wants them (an input from opset 13)."""
    if opset < 13:
        return helper.make_node(op, [x], [out], name=name, axes=axes)
    const = derived(name, "axes")
    inits.append(numpy_helper.from_array(np.array(axes, dtype=np.int64), const))
    return helper.make_node(op, [x, const], [out], name=name)


def replacement(rec: Recurrence, opset: int) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """The nodes and initializers that compute what `rec.node` did."""
    cell, base = rec.cell, rec.node.name or rec.node.output[0]
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    x = rec.x
    if rec.time_axis == 1:
        x = derived(base, "time_major")
        nodes.append(helper.make_node("Transpose", [rec.x], [x], name=x, perm=[1, 0, 2]))
    weights = []
    for what, value in (("W", cell.W), ("R", cell.R), ("B", cell.B)):
        weights.append(derived(base, what))
        inits.append(numpy_helper.from_array(value, weights[-1]))
    states = []
    for role in ("h", "c") if cell.op == "LSTM" else ("h",):
        init = rec.initial[role]
        if init:
            states.append(derived(base, f"initial_{role}"))
            nodes.append(_axes_op("Unsqueeze", init, states[-1], [0], opset, states[-1], inits))
        else:
            states.append("")
    inputs = [x, *weights, "", *states]
    while inputs[-1] == "":
        inputs.pop()
    y = derived(base, "Y") if rec.sequences else ""
    outputs = [y, derived(base, "Y_h") if rec.finals["h"] else ""]
    if cell.op == "LSTM":
        outputs.append(derived(base, "Y_c") if rec.finals["c"] else "")
    while outputs and outputs[-1] == "":
        outputs.pop()
    attrs = {"hidden_size": cell.hidden}
    if cell.op == "GRU":
        attrs["linear_before_reset"] = cell.linear_before_reset
    if [a.op for a in cell.acts] != DEFAULT_ACTIVATIONS[cell.op]:
        attrs["activations"] = [a.op for a in cell.acts]
        alphas = [a.alpha for a in cell.acts if a.alpha is not None]
        if alphas:      # consumed in order by the activations that take them (HardSigmoid)
            attrs["activation_alpha"] = alphas
            attrs["activation_beta"] = [a.beta for a in cell.acts if a.beta is not None]
    nodes.append(helper.make_node(cell.op, inputs, outputs or [derived(base, "Y")], name=derived(base, cell.op.lower()),
                                  **attrs))
    for out, axis in rec.sequences:
        target = out if axis == 0 else derived(out, "time_major")
        nodes.append(_axes_op("Squeeze", y, target, [1], opset, derived(out, "squeeze"), inits))
        if axis == 1:
            nodes.append(helper.make_node("Transpose", [target], [out], name=derived(out, "batch_major"), perm=[1, 0, 2]))
    for role, k in (("h", 1), ("c", 2)):
        if rec.finals.get(role):
            nodes.append(_axes_op("Squeeze", outputs[k], rec.finals[role], [0], opset, derived(rec.finals[role], "squeeze"),
                                  inits))
    return nodes, inits


def ops_added(rec: Recurrence) -> tuple[str, ...]:
    """The op types the replacement writes (for a target's op set)."""
    ops = [rec.cell.op, "Squeeze"]
    if any(rec.initial.values()):
        ops.append("Unsqueeze")
    if rec.time_axis == 1 or any(a == 1 for _, a in rec.sequences):
        ops.append("Transpose")
    return tuple(ops)
