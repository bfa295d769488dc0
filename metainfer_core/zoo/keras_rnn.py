"""Recurrent layers built the way tf2onnx writes Keras' when it keeps the `Loop`: a loop per layer
whose body is the cell spelt out, at random weights. The forms the recurrent action
(metainfer_core/actions/recurrent/) proves, for its tests and experiments/recurrent_loops.py; not
among the zoo's names().

- The outer graph, as Keras' `backend.rnn` has it: the batch-major input transposed to time-major
  (or, `gather_axis=1`, read per step along axis 1), the trip count read off its shape, zero
  initial states from ConstantOfShape (or graph inputs), the steps' outputs transposed back.
- The body: the step's input a Gather at the iteration counter (or a counter carried beside the
  states), the cell (LSTM: one fused gate matrix split i, f, c, o; GRU: z, r, h with
  `reset_after` either way; SimpleRNN), the condition passed through or a Less on the count.
- `loop="Scan"` writes the same cell as a Scan over the sequence instead.
- `bounds="tf2onnx_max"` / `"tf2onnx_none"`: the loop bounds tf2onnx writes for a TF 2 while loop
  (trip count INT64_MAX, or none), ended by Less(float(t + 1), float(T)) on an int32 counter t and
  the length T carried through the loop, read outside as Squeeze(Slice(Cast<int32>(Shape(x)))).
- `per_gate=True`: Keras' implementation=1 cell (keras_rnn_per_gate.py), with `dropout_ones` the
  ones_like dropout Muls on x and h."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from metainfer_core.zoo import keras_rnn_per_gate as per_gate_cells

GATES = {"lstm": 4, "gru": 3, "rnn": 1}


class _Body:
    """Nodes of one body, with its scalar constants as Constant nodes (the way tf2onnx leaves them)."""

    def __init__(self, prefix: str, opset: int):
        self.nodes: list[onnx.NodeProto] = []
        self.prefix, self.opset, self.n = prefix, opset, 0

    def op(self, op_type: str, inputs: list[str], outputs: int | list[str] = 1, **attrs) -> list[str]:
        self.n += 1
        outs = outputs if isinstance(outputs, list) else \
            [f"{self.prefix}/{op_type.lower()}_{self.n}_{k}" for k in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=f"{self.prefix}/{op_type}_{self.n}", **attrs))
        return outs

    def one(self, op_type: str, *inputs: str, **attrs) -> str:
        return self.op(op_type, list(inputs), **attrs)[0]

    def const(self, value, dtype=np.float32) -> str:
        return self.one("Constant", value=numpy_helper.from_array(np.array(value, dtype=dtype)))

    def split(self, x: str, sizes: list[int]) -> list[str]:
        if self.opset >= 13:
            return self.op("Split", [x, self.const(sizes, np.int64)], len(sizes), axis=1)
        return self.op("Split", [x], len(sizes), axis=1, split=sizes)

    def cols(self, x: str, lo: int, hi: int) -> str:
        c = lambda v: self.const([v], np.int64)
        return self.one("Slice", x, c(lo), c(hi), c(1))

    def act(self, x: str, kind: str) -> str:
        if kind == "sigmoid":
            return self.one("Sigmoid", x)
        if kind == "tanh":
            return self.one("Tanh", x)
        if kind == "relu":
            return self.one("Relu", x)
        if kind == "HardSigmoid":                       # the ONNX op
            return self.one("HardSigmoid", x, alpha=0.2, beta=0.5)
        if kind in ("hard_sigmoid", "hard_sigmoid_minmax"):     # Keras': clip(0.2·x + 0.5, 0, 1), spelt out
            y = self.one("Add", self.one("Mul", x, self.const(0.2)), self.const(0.5))
            if kind == "hard_sigmoid_minmax":                   # Keras 2.0's clip_by_value: Minimum, Maximum
                return self.one("Max", self.one("Min", y, self.const(1.0)), self.const(0.0))
            return self.one("Clip", y, self.const(0.0), self.const(1.0))
        raise ValueError(f"unknown activation {kind!r}")


def _lstm(b: _Body, x: str, h: str, c: str, w: dict, hidden: int, act: str, ract: str) -> tuple[str, str]:
    z = b.one("Add", b.one("Add", b.one("MatMul", x, w["kernel"]), b.one("MatMul", h, w["recurrent"])), w["bias"])
    zi, zf, zc, zo = b.split(z, [hidden] * 4)                          # Keras' order: i, f, c, o
    i, f, o = b.act(zi, ract), b.act(zf, ract), b.act(zo, ract)
    c_new = b.one("Add", b.one("Mul", f, c), b.one("Mul", i, b.act(zc, act)))
    return b.one("Mul", o, b.act(c_new, act)), c_new


def _gru(b: _Body, x: str, h: str, w: dict, hidden: int, act: str, ract: str, reset_after: bool) -> str:
    xz, xr, xh = b.split(b.one("Add", b.one("MatMul", x, w["kernel"]), w["bias"]), [hidden] * 3)
    if reset_after:
        rz, rr, rh = b.split(b.one("Add", b.one("MatMul", h, w["recurrent"]), w["recurrent_bias"]), [hidden] * 3)
        z, r = b.act(b.one("Add", xz, rz), ract), b.act(b.one("Add", xr, rr), ract)
        hh = b.act(b.one("Add", xh, b.one("Mul", r, rh)), act)
    else:                                   # recurrent_kernel[:, :2H] for z and r, [:, 2H:] on r·h
        inner = b.one("MatMul", h, w["recurrent_zr"])
        z = b.act(b.one("Add", xz, b.cols(inner, 0, hidden)), ract)
        r = b.act(b.one("Add", xr, b.cols(inner, hidden, 2 * hidden)), ract)
        hh = b.act(b.one("Add", xh, b.one("MatMul", b.one("Mul", r, h), w["recurrent_h"])), act)
    return b.one("Add", b.one("Mul", z, h), b.one("Mul", b.one("Sub", b.const(1.0), z), hh))


def _rnn(b: _Body, x: str, h: str, w: dict, act: str) -> str:
    return b.act(b.one("Add", b.one("Add", b.one("MatMul", x, w["kernel"]), w["bias"]), b.one("MatMul", h, w["recurrent"])),
                 act)


def _weights(rng, cell: str, name: str, features: int, hidden: int, reset_after: bool, scale: float,
             per_gate: bool = False) -> dict:
    g = GATES[cell]
    arr = lambda *shape: (rng.standard_normal(shape) * scale).astype(np.float32)
    w = {"kernel": arr(features, g * hidden), "recurrent": arr(hidden, g * hidden), "bias": arr(g * hidden)}
    if cell == "gru" and reset_after:
        w["recurrent_bias"] = arr(g * hidden)
    if cell == "gru" and not reset_after and not per_gate:      # (the per-gate cell cuts the whole kernel)
        w["recurrent_zr"], w["recurrent_h"] = w["recurrent"][:, :2 * hidden], w["recurrent"][:, 2 * hidden:]
        del w["recurrent"]
    return {k: numpy_helper.from_array(np.ascontiguousarray(v), f"{name}/{k}") for k, v in w.items()}


def _tf2onnx_bounds(b: _Body, nodes: list, const, p: str, xs: str, axis: int, t_next: str, loop_in: list,
                    bounds: str) -> str:
    """tf2onnx's while-loop bounds (see the module's doc): writes the outer length and the loop's
    first inputs (trip, cond, t0, T) into `loop_in`; answers the body's condition."""
    nodes.extend([
        helper.make_node("Shape", [xs], [f"{p}/seq_shape"], name=f"{p}/seq_shape"),
        helper.make_node("Cast", [f"{p}/seq_shape"], [f"{p}/seq_shape32"], name=f"{p}/seq_shape32", to=TensorProto.INT32),
        helper.make_node("Slice", [f"{p}/seq_shape32", const(f"{p}/len_start", [axis]), const(f"{p}/len_end", [axis + 1]),
                                   const(f"{p}/len_axes", [0])], [f"{p}/len_1"], name=f"{p}/len_1"),
        helper.make_node("Squeeze", [f"{p}/len_1", const(f"{p}/len_squeeze", [0])], [f"{p}/len"], name=f"{p}/len"),
        helper.make_node("Cast", [f"{p}/len"], [f"{p}/len_f"], name=f"{p}/len_f", to=TensorProto.FLOAT),
        helper.make_node("Less", [const(f"{p}/zero_f", 0.0, np.float32), f"{p}/len_f"], [f"{p}/first"], name=f"{p}/first")])
    trip = const(f"{p}/max_iterations", 2 ** 63 - 1) if bounds == "tf2onnx_max" else ""
    loop_in[:] = [trip, f"{p}/first", const(f"{p}/time", 0, np.int32), f"{p}/len"]
    return b.one("Less", b.one("Cast", t_next, to=TensorProto.FLOAT), b.one("Cast", f"{p}/T", to=TensorProto.FLOAT))


def keras_rnn(cell: str = "lstm", *, features: int = 8, hidden: int = 16, layers: int = 1, steps: int | str = "T",
              batch: int | str = "N", batch_major: bool = True, gather_axis: int = 0, return_sequences: bool = True,
              return_state: bool = False, initial: str = "zeros", activation: str = "tanh",
              recurrent_activation: str = "sigmoid", reset_after: bool = True, counter: bool = False,
              cond: str = "identity", loop: str = "Loop", bidirectional: bool = False, carried_weights: bool = False,
              seed: int = 0, opset: int = 15, scale: float = 0.3, bounds: str = "trip", length_axis: str = "time",
              per_gate: bool = False, dropout_ones: float | None = None) -> onnx.ModelProto:
    """`layers` stacked Keras recurrent layers (`cell`: lstm, gru or rnn) on input `x`
    ([batch, steps, features] when batch_major, else [steps, batch, features]); output `y` (the
    last layer's sequence when return_sequences, else its last h) and, with return_state, `h`
    (and `c`). initial: "zeros" or "input" (graph inputs h0_<layer> [and c0_<layer>]). bidirectional: a
    second loop per layer over the reversed sequence, the two joined on the features (Keras'
    Bidirectional, merge_mode concat). cond: "identity", "less" (Less(i + 1, steps)) or "tf2onnx"
    (with counter). carried_weights: the weights passed through the loop as carried values.
    bounds: "trip" (a trip count equal to the length), "tf2onnx_max" or "tf2onnx_none" (see the
    module's doc); length_axis "batch" reads the carried T off the batch dim instead (a near miss).
    per_gate / dropout_ones: Keras' implementation=1 cell and its ones_like dropout (lstm, or gru
    with reset_after=False)."""
    if per_gate and (cell == "rnn" or (cell == "gru" and reset_after)):
        raise ValueError("the per-gate form is written for lstm and for gru with reset_after=False")
    if bounds != "trip" and loop != "Loop":
        raise ValueError("tf2onnx's bounds are a Loop's")
    if bidirectional and return_state:
        raise ValueError("return_state is not written for a bidirectional layer")
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, steps, features] if batch_major
                                            else [steps, batch, features])]
    outputs = []
    const = lambda name, value, dtype=np.int64: inits.append(numpy_helper.from_array(np.array(value, dtype), name)) or name
    def direction(p: str, seq: str, width: int, tag: str, backwards: bool) -> tuple[str, list[str], list[str]]:
        """One recurrent layer's loop over `seq` (go_backwards: over its reverse, as Keras' backward
        layer of a Bidirectional): (every step's h, time-major), its last states, their names."""
        w = _weights(rng, cell, p, width, hidden, reset_after, scale, per_gate)
        inits.extend(w.values())
        names = {k: (f"{p}/captured_{k}" if carried_weights and loop == "Loop" else t.name) for k, t in w.items()}
        if batch_major and gather_axis == 0:
            xs, axis = f"{p}/time_major", 0
            nodes.append(helper.make_node("Transpose", [seq], [xs], name=f"{p}/Transpose", perm=[1, 0, 2]))
        else:
            xs, axis = seq, time_in
        if backwards:                   # tf.reverse along time: a Slice with step -1
            nodes.append(helper.make_node("Slice", [xs, const(f"{p}/rev_start", [-1]), const(f"{p}/rev_end", [-2 ** 63]),
                                                    const(f"{p}/rev_axis", [axis]), const(f"{p}/rev_step", [-1])],
                                          [f"{p}/reversed"], name=f"{p}/reverse"))
            xs = f"{p}/reversed"
        nodes.append(helper.make_node("Shape", [seq], [f"{p}/shape"], name=f"{p}/Shape"))
        if loop == "Loop" and bounds == "trip":
            nodes.append(helper.make_node("Gather", [f"{p}/shape", const(f"{p}/time_axis", time_in)], [f"{p}/steps"],
                                          name=f"{p}/steps", axis=0))
        states = ["h", "c"] if cell == "lstm" else ["h"]
        init = {}
        for s in states:
            if initial == "input":
                init[s] = f"{s}0_{tag}"
                inputs.append(helper.make_tensor_value_info(init[s], TensorProto.FLOAT, [batch, hidden]))
            else:
                init[s] = f"{p}/{s}0"
        if initial != "input":
            nodes.extend([helper.make_node("Gather", [f"{p}/shape", const(f"{p}/batch_axis", [batch_in])], [f"{p}/batch"],
                                           name=f"{p}/batch", axis=0),
                          helper.make_node("Concat", [f"{p}/batch", const(f"{p}/units", [hidden])], [f"{p}/zeros_shape"],
                                           name=f"{p}/zeros_shape", axis=0)])
            for s in states:
                nodes.append(helper.make_node("ConstantOfShape", [f"{p}/zeros_shape"], [init[s]], name=f"{p}/{s}0",
                                              value=numpy_helper.from_array(np.zeros(1, np.float32))))
        b = _Body(f"{p}/body", opset)
        f32 = lambda n, shape=(batch, hidden): helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape))
        if loop == "Loop":
            body_in = [helper.make_tensor_value_info(f"{p}/i", TensorProto.INT64, []),
                       helper.make_tensor_value_info(f"{p}/cond_in", TensorProto.BOOL, [])]
            index = f"{p}/i"
            if counter or bounds != "trip":
                body_in.append(helper.make_tensor_value_info(f"{p}/t", TensorProto.INT32 if bounds != "trip"
                                                             else TensorProto.INT64, []))
                index = f"{p}/t"
            if bounds != "trip":
                body_in.append(helper.make_tensor_value_info(f"{p}/T", TensorProto.INT32, []))
            x_t = b.one("Gather", xs, index, axis=axis)
        else:
            body_in, x_t = [], f"{p}/x_t"
        body_in += [f32(f"{p}/{s}") for s in states]
        if loop == "Scan":
            body_in.append(f32(x_t, (batch, width)))
        if per_gate and cell == "lstm":
            news = list(per_gate_cells.lstm(b, x_t, f"{p}/h", f"{p}/c", names, hidden, activation, recurrent_activation,
                                            dropout_ones))
        elif per_gate:
            news = [per_gate_cells.gru(b, x_t, f"{p}/h", names, hidden, activation, recurrent_activation, dropout_ones)]
        elif cell == "lstm":
            news = list(_lstm(b, x_t, f"{p}/h", f"{p}/c", names, hidden, activation, recurrent_activation))
        elif cell == "gru":
            news = [_gru(b, x_t, f"{p}/h", names, hidden, activation, recurrent_activation, reset_after)]
        else:
            news = [_rnn(b, x_t, f"{p}/h", names, activation)]
        scan = b.one("Identity", news[0])
        body_out = [f32(n) for n in news] + [f32(scan)]
        seq_out, lasts = f"{p}/sequence", [f"{p}/last_{s}" for s in states]
        if loop == "Loop":
            outs, loop_in = [], [f"{p}/steps", const(f"{p}/true", True, np.bool_)] if bounds == "trip" else []
            t_next = b.one("Add", f"{p}/t", b.const(1, np.int64)) if counter and bounds == "trip" else ""
            if bounds != "trip":
                t_next = b.one("Add", f"{p}/t", b.const(1, np.int32))
                cond_out = _tf2onnx_bounds(b, nodes, const, p, xs, axis if length_axis == "time" else 1 - axis, t_next,
                                           loop_in, bounds)
                body_out.insert(0, helper.make_tensor_value_info(cond_out, TensorProto.BOOL, []))
                body_out.insert(1, helper.make_tensor_value_info(t_next, TensorProto.INT32, []))
                body_out.insert(2, helper.make_tensor_value_info(f"{p}/T", TensorProto.INT32, []))
                outs += [f"{p}/last_t", f"{p}/last_T"]
            elif cond == "identity":
                cond_out = b.one("Identity", f"{p}/cond_in")
            elif cond == "less":                       # the next count below the length
                cond_out = b.one("Less", b.one("Add", f"{p}/i", b.const(1, np.int64)), f"{p}/steps")
            else:                   # tf2onnx's inlined While cond: i < maximum_iterations and time' < length
                assert counter, "tf2onnx's condition reads the carried time counter"
                cond_out = b.one("And", b.one("Less", f"{p}/i", b.one("Identity", f"{p}/steps")),
                                 b.one("Less", t_next, f"{p}/steps"))
                zero = const(f"{p}/zero_count", 0)
                nodes.extend([helper.make_node("Less", [zero, f"{p}/steps"], [f"{p}/first_a"], name=f"{p}/first_a"),
                              helper.make_node("Less", [zero, f"{p}/steps"], [f"{p}/first_b"], name=f"{p}/first_b"),
                              helper.make_node("And", [f"{p}/first_a", f"{p}/first_b"], [f"{p}/first"], name=f"{p}/first")])
                loop_in[1] = f"{p}/first"
            if bounds == "trip":
                body_out.insert(0, helper.make_tensor_value_info(cond_out, TensorProto.BOOL, []))
            if counter and bounds == "trip":
                body_out.insert(1, helper.make_tensor_value_info(t_next, TensorProto.INT64, []))
                loop_in.append(const(f"{p}/zero", 0))
                outs.append(f"{p}/last_t")
            if carried_weights:             # TF 2 passes what the body captures through the loop
                for k, t in w.items():
                    body_in.insert(len(body_in) - len(states), helper.make_tensor_value_info(
                        f"{p}/captured_{k}", TensorProto.FLOAT, list(t.dims)))
                    body_out.insert(len(body_out) - len(states) - 1, helper.make_tensor_value_info(
                        b.one("Identity", f"{p}/captured_{k}"), TensorProto.FLOAT, list(t.dims)))
                    loop_in.append(t.name)
                    outs.append(f"{p}/captured_{k}_final")
            graph = helper.make_graph(b.nodes, f"{p}/body", body_in, body_out)
            nodes.append(helper.make_node("Loop", loop_in + [init[s] for s in states], outs + lasts + [seq_out],
                                          name=f"{p}/while", body=graph))
        else:
            graph = helper.make_graph(b.nodes, f"{p}/body", body_in, body_out)
            nodes.append(helper.make_node("Scan", [init[s] for s in states] + [xs], lasts + [seq_out], name=f"{p}/scan",
                                          body=graph, num_scan_inputs=1, scan_input_axes=[axis]))
        if backwards:                   # Bidirectional reverses the backward layer's steps again
            nodes.append(helper.make_node("Slice", [seq_out, f"{p}/rev_start", f"{p}/rev_end", const(f"{p}/zero_axis", [0]),
                                                    f"{p}/rev_step"], [f"{p}/in_order"], name=f"{p}/in_order"))
            seq_out = f"{p}/in_order"
        return seq_out, lasts, states

    seq, width = "x", features
    time_in, batch_in = (1, 0) if batch_major else (0, 1)
    for layer in range(layers):
        seq_out, lasts, states = direction(f"l{layer}", seq, width, str(layer), False)
        if bidirectional:
            back_out, back_lasts, _ = direction(f"l{layer}b", seq, width, f"{layer}b", True)
            joined = (f"l{layer}/both", f"l{layer}/both_last")
            nodes.append(helper.make_node("Concat", [seq_out, back_out], [joined[0]], name=joined[0], axis=2))
            nodes.append(helper.make_node("Concat", [lasts[0], back_lasts[0]], [joined[1]], name=joined[1], axis=1))
            seq_out, lasts = joined[0], [joined[1]]
        width = hidden * (2 if bidirectional else 1)
        if layer == layers - 1 and not return_sequences:
            seq = lasts[0]
        elif batch_major:
            seq = f"l{layer}/output"
            nodes.append(helper.make_node("Transpose", [seq_out], [seq], name=seq, perm=[1, 0, 2]))
        else:
            seq = seq_out
    nodes.append(helper.make_node("Identity", [seq], ["y"], name="y"))
    out = hidden * (2 if bidirectional else 1)
    shape = [batch, out] if not return_sequences else [batch, steps, out] if batch_major else [steps, batch, out]
    outputs.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, shape))
    if return_state:
        for s, last in zip(states, lasts):
            nodes.append(helper.make_node("Identity", [last], [s], name=s))
            outputs.append(helper.make_tensor_value_info(s, TensorProto.FLOAT, [batch, hidden]))
    graph = helper.make_graph(nodes, f"keras_{cell}", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)
