"""Which Loop and Scan nodes run a recurrent cell over a sequence, proved from the graph: the step
input (a Gather on the iteration counter, or a Scan's scan input), a trip count equal to the
sequence length and a condition true on every step (or no trip count, or INT64_MAX, and a
condition that turns false right after the last step), the carried states (beside counters and
pass-throughs nothing reads afterwards), the scan outputs (the new hidden state) and a body that
computes the cell and nothing else."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

from metainfer_core.actions.recurrent.cells import Cell, match_cell
from metainfer_core.actions.recurrent.values import Refused, Scope
from metainfer_core.ir.graph_utils import Shape, attr_value, node_reads, transpose_perm


@dataclass
class Recurrence:
    node: onnx.NodeProto
    cell: Cell
    x: str                      # the outer sequence the steps read
    time_axis: int              # its time axis: 0 ([T, B, F]) or 1 ([B, T, F])
    initial: dict[str, str]     # "h" / "c" -> the outer initial value ("" when it is zeros)
    finals: dict[str, str]      # "h" / "c" -> the node's output holding the last state ("" when none)
    sequences: list[tuple[str, int]] = field(default_factory=list)  # outputs holding every step's h, their time axis


def _peel(scope: Scope, name: str, ops=("Identity", "Cast", "Squeeze", "Unsqueeze", "Reshape")) -> str:
    while (p := scope.producer.get(name)) is not None and p.op_type in ops:
        scope.used.add(id(p))
        name = p.input[0]
    return name


def _whole_slice(scope: Scope, node: onnx.NodeProto) -> bool:
    """A Slice that keeps every element, forwards or reversed (a sequence's reverse keeps its dims)."""
    if len(node.input) < 5:
        return False
    starts, ends, steps = (scope.const(i) for i in (node.input[1], node.input[2], node.input[4]))
    if starts is None or ends is None or steps is None:
        return False
    return all((st == 1 and s == 0 and e >= 2 ** 31 - 1) or (st == -1 and s in (-1, 2 ** 63 - 1) and e <= -2 ** 31)
               for s, e, st in zip(starts.tolist(), ends.tolist(), steps.tolist()))


def _root(scope: Scope, name: str, axis: int) -> tuple[str, int]:
    """The tensor and axis a dim comes from, through Transposes and what keeps the shape."""
    while (p := scope.producer.get(name)) is not None:
        if p.op_type == "Transpose":
            perm = transpose_perm(p, None)
            if perm is None or axis >= len(perm):
                break
            axis = perm[axis]
        elif not (p.op_type in ("Identity", "ReverseSequence") or (p.op_type == "Slice" and _whole_slice(scope, p))):
            break
        name = p.input[0]
    return name, axis


def _dim_read(scope: Scope, name: str) -> tuple[str, int] | None:
    """(tensor, axis) when `name` is one dim read off a Shape (Gather or Slice of it)."""
    p = scope.producer.get(_peel(scope, name))
    if p is None or p.op_type not in ("Gather", "Slice"):
        return None
    # tf2onnx casts the shape to int32 before slicing it (TF's strided_slice on an int32 shape)
    shape = scope.producer.get(_peel(scope, p.input[0], ("Identity", "Cast")))
    if shape is None or shape.op_type != "Shape" or attr_value(shape, "end") is not None:
        return None
    start = attr_value(shape, "start", 0)
    k = scope.const(p.input[1]) if len(p.input) > 1 else None
    if p.op_type == "Slice":
        ends = scope.const(p.input[2]) if len(p.input) > 2 else None
        if k is None or ends is None or k.size != 1 or int(ends.reshape(-1)[0]) != int(k.reshape(-1)[0]) + 1:
            return None
    if k is None or k.size != 1 or attr_value(p, "axis", 0) != 0 or int(k.reshape(-1)[0]) < 0 or start < 0:
        return None
    return shape.input[0], start + int(k.reshape(-1)[0])


def seq_len(outer: Scope, shapes: dict[str, Shape | None], name: str, x: str, axis: int) -> bool:
    """Whether the value `name` (in the outer graph) is dim `axis` of `x`: read off its shape (or off
    the tensor it was transposed from), or a constant equal to that dim when it is static."""
    dims = shapes.get(x) or []
    want = dims[axis] if axis < len(dims) else None
    value = outer.const(_peel(outer, name))
    if value is not None:
        return value.size == 1 and isinstance(want, int) and int(value.reshape(-1)[0]) == want
    read = _dim_read(outer, name)
    if read is None:
        return False
    if _root(outer, *read) == _root(outer, x, axis):
        return True
    got = (shapes.get(read[0]) or [])
    got = got[read[1]] if read[1] < len(got) else None
    return got is not None and got == want           # the same static size, or the same symbolic dim


def _increment(scope: Scope, name: str, of: set[str]) -> bool:
    """Whether `name` is c + 1 for a counter c in `of`."""
    p = scope.node(name, "Add")
    if p is None:
        return False
    a, b = (scope.strip(i) for i in p.input)
    return (a in of and scope.scalar(b) == 1) or (b in of and scope.scalar(a) == 1)


def _always_true(scope: Scope, name: str, counts: set[str], nexts: set[str], seq) -> bool:
    """Whether a loop condition is true on every step the trip count allows: a true constant, an
    And of such, or Less(count, sequence length) where count is the step's counter or the next
    one (`counts`, `nexts`: the body's; none in the outer graph, where Less(0, length) is the first
    test, true whenever a step runs at all)."""
    if not name:
        return True
    value = scope.const(name)
    if value is not None:
        return value.dtype == bool and bool(value.all())
    p = scope.node(name, "And", "Less")
    if p is None:
        return False
    if p.op_type == "And":
        return all(_always_true(scope, i, counts, nexts, seq) for i in p.input)
    count, bound = scope.strip(_peel(scope, p.input[0])), p.input[1]
    first = not counts and scope.scalar(count) == 0
    return (count in counts | nexts or _increment(scope, count, counts) or first) and seq(bound)


def _ends_at_length(scope: Scope, name: str, counts: set[str], nexts: set[str], seq) -> bool:
    """Whether a body condition turns false exactly after the step that reads the last element:
    Less(next count, sequence length), possibly And-ed with conditions true on every step. Casts
    around the operands are seen through (tf2onnx compares int32 counts as floats, exact below 2^24
    steps, far beyond any sequence a recurrent layer runs)."""
    p = scope.node(name, "And", "Less")
    if p is None:
        return False
    if p.op_type == "And":
        a, b = p.input
        return (_ends_at_length(scope, a, counts, nexts, seq) and _always_true(scope, b, counts, nexts, seq)) or \
            (_ends_at_length(scope, b, counts, nexts, seq) and _always_true(scope, a, counts, nexts, seq))
    count = scope.strip(_peel(scope, p.input[0]))
    return (count in nexts or _increment(scope, count, counts)) and seq(p.input[1])


def _unbounded(outer: Scope, trip: str) -> bool:
    """No trip count, or INT64_MAX (tf2onnx's maximum_iterations): only the condition ends the loop."""
    if not trip:
        return True
    value = outer.const(_peel(outer, trip, ("Identity",)))
    return value is not None and value.size == 1 and value.dtype == np.int64 and int(value.reshape(-1)[0]) == 2 ** 63 - 1


def _unread(outer: Scope, name: str) -> bool:
    return not name or (not outer.consumers.get(name) and name not in {o.name for o in outer.graph.output})


def _rank3_axis(shapes: dict[str, Shape | None], x: str, axis: int, what: str) -> int:
    dims = shapes.get(x)
    if dims is None or len(dims) != 3:
        raise Refused(f"the sequence {x!r} {what} is not of rank 3 (time, batch, features)")
    axis = axis + 3 if axis < 0 else axis
    if axis not in (0, 1):
        raise Refused(f"the steps run along axis {axis} of {x!r} (a recurrent operator takes axis 0 or 1)")
    return axis


def _classify(scope: Scope, names: list[str], outs: list[str], inits: list[str], outer: Scope):
    states, passes, counters = [], [], []
    for k, (v, vo, init) in enumerate(zip(names, outs, inits)):
        if scope.strip(vo) == v:
            passes.append(k)
            scope.aliases[v] = init          # (TF 2 passes captured weights through the loop)
        elif _increment(scope, vo, {v}) and outer.scalar(init) == 0:
            counters.append(k)
        else:
            states.append(k)
    return states, passes, counters


def _step_input(scope: Scope, counters: set[str], shapes) -> tuple[str, int, str]:
    reads = []
    for n in scope.graph.node:
        data = scope.aliases.get(n.input[0], n.input[0]) if n.op_type == "Gather" else ""
        if n.op_type == "Gather" and len(n.input) == 2 and scope.strip(_peel(scope, n.input[1], ("Identity", "Cast"))) \
                in counters and data and not scope.defines(data):
            reads.append(n)
    if not reads:
        raise Refused("the body reads no sequence at the iteration counter (no per-step Gather)")
    if len(reads) > 1:
        raise Refused(f"the body reads {len(reads)} sequences per step (a mask or a second input; a cell reads one)")
    g = reads[0]
    scope.used.add(id(g))
    _peel(scope, g.input[1], ("Identity", "Cast"))
    x = scope.aliases.get(g.input[0], g.input[0])
    return x, _rank3_axis(shapes, x, attr_value(g, "axis", 0), "read per step"), g.output[0]


def _finish(node, scope: Scope, outer: Scope, x: str, axis: int, x_t: str, states: list[int], names: list[str],
            outs: list[str], inits: list[str], finals: list[str], scans: list[str], scan_outs: list[str],
            scan_axes: list[int], shapes) -> Recurrence:
    """The cell on the carried values (`names`, their new values `outs`, `inits` and `finals` in the
    outer graph; `states`: which of them the cell updates) and the scan outputs' check."""
    state_names = [names[k] for k in states]
    cell = match_cell(scope, x_t, state_names, {names[k]: outs[k] for k in states})
    carried = {cell.h, cell.c} - {""}
    stacked = [scope.strip(s) for s in scans]             # (marks the Identity nodes they go through)
    for n in scope.graph.node:
        if id(n) in scope.used or n.op_type == "Constant":
            continue
        read = sorted(node_reads(n) & carried)
        if read:
            raise Refused(f"the state {read[0]!r} is read outside the cell ({n.op_type} '{n.name or n.output[0]}')")
        raise Refused(f"the body computes something beside the cell ({n.op_type} '{n.name or n.output[0]}')")
    sequences = []
    for s, out, ax in zip(stacked, scan_outs, scan_axes):
        if s != scope.strip(cell.h_out):
            raise Refused(f"a scan output is not the new hidden state ({s!r})")
        if not _unread(outer, out):
            sequences.append((out, ax))
    slot = {names[k]: k for k in states}
    initial, last = {}, {}
    for role, name in (("h", cell.h), ("c", cell.c)):
        if name:
            init = inits[slot[name]]
            initial[role] = "" if zeros(outer, init) else init
            last[role] = finals[slot[name]] if not _unread(outer, finals[slot[name]]) else ""
            _initial_shape(shapes.get(init) if init else None, shapes[x][1 - axis], init, cell.hidden, zero=not initial[role])
    return Recurrence(node, cell, x, axis, initial, last, sequences)


def _initial_shape(dims: Shape | None, batch, init: str, hidden: int, zero: bool) -> None:
    """An initial state must be [batch, hidden] (rank 2, so that the gates' Splits cut
    columns); zeros may be [1, hidden], which broadcasts to the same zeros."""
    if dims is None or len(dims) != 2 or (isinstance(dims[1], int) and dims[1] != hidden):
        raise Refused(f"the initial state {init!r} is not known to be [batch, {hidden}]")
    if not zero and dims[0] != batch and not (isinstance(dims[0], str) and isinstance(batch, str)):
        if dims[0] == 1 or (isinstance(dims[0], int) and isinstance(batch, int)):
            raise Refused(f"the initial state {init!r} has batch {dims[0]}, the sequence {batch}")


def zeros(outer: Scope, name: str) -> bool:
    """Whether an initial state is all zeros (ONNX's recurrent operators then need none)."""
    value = outer.const(name)
    if value is not None:
        return not value.any()
    p = outer.producer.get(_peel(outer, name, ("Identity", "Cast")))
    if p is not None and p.op_type == "ConstantOfShape":
        v = attr_value(p, "value")
        return v is None or not onnx.numpy_helper.to_array(v).any()
    if p is not None and p.op_type == "Expand":
        v = outer.const(p.input[0])
        return v is not None and not v.any()
    return False


def loop_form(outer: Scope, shapes: dict[str, Shape | None], node: onnx.NodeProto) -> Recurrence:
    body = attr_value(node, "body")
    scope = Scope(body, outer)
    names, outs = [i.name for i in body.input], [o.name for o in body.output]
    n = len(names) - 2
    if n < 1:
        raise Refused("the loop carries no state")
    inits, finals = list(node.input[2:]), list(node.output[:n])
    states, passes, counters = _classify(scope, names[2:], outs[1:1 + n], inits, outer)
    for k in passes + counters:
        if not _unread(outer, finals[k]):
            raise Refused(f"the loop's counter or pass-through {finals[k]!r} is read after the loop")
    counts = {names[0]} | {names[2 + k] for k in counters}        # the iteration number and the carried counters
    x, axis, x_t = _step_input(scope, counts, shapes)
    trip = node.input[0]
    unbounded = _unbounded(outer, trip)
    if not unbounded and not seq_len(outer, shapes, trip, x, axis):
        raise Refused(f"the trip count is not the sequence length (dim {axis} of {x!r})")

    def seq(bound: str) -> bool:
        bound = _peel(scope, bound)
        bound = scope.aliases.get(bound, bound)      # (tf2onnx carries the length through the loop)
        return (bound == trip and not unbounded) or (not scope.defines(bound) and seq_len(outer, shapes, bound, x, axis))
    nexts = {scope.strip(outs[1 + k]) for k in counters}
    if unbounded:       # the condition alone must stop the loop right after the last step
        if not _ends_at_length(scope, outs[0], counts, nexts, seq):
            raise Refused(f"the loop has no trip count and its condition is not proved to end it at the sequence "
                          f"length (dim {axis} of {x!r})")
        body_ok = True
    else:
        body_ok = scope.strip(outs[0]) == names[1] or _always_true(scope, outs[0], counts, nexts, seq)
    first_ok = _always_true(outer, node.input[1] if len(node.input) > 1 else "", set(), set(), seq)
    if not (body_ok and first_ok):
        raise Refused("the loop's condition may end it before the sequence does (a mask or a length)")
    return _finish(node, scope, outer, x, axis, x_t, states, names[2:], outs[1:1 + n], inits, finals,
                   outs[1 + n:], list(node.output[n:]), [0] * (len(outs) - 1 - n), shapes)


def scan_form(outer: Scope, shapes: dict[str, Shape | None], node: onnx.NodeProto) -> Recurrence:
    body = attr_value(node, "body")
    scope = Scope(body, outer)
    nsi = attr_value(node, "num_scan_inputs")
    n = len(node.input) - nsi
    if nsi != 1:
        raise Refused(f"the scan reads {nsi} sequences (a cell reads one)")
    names, outs = [i.name for i in body.input], [o.name for o in body.output]
    if any(attr_value(node, "scan_input_directions", [0])) or any(attr_value(node, "scan_output_directions", [0])):
        raise Refused("the scan runs a sequence backwards")
    x = node.input[n]
    axis = _rank3_axis(shapes, x, (attr_value(node, "scan_input_axes") or [0])[0], "scanned")
    inits, finals = list(node.input[:n]), list(node.output[:n])
    states, passes, counters = _classify(scope, names[:n], outs[:n], inits, outer)
    for k in passes + counters:
        if not _unread(outer, finals[k]):
            raise Refused(f"the scan's counter or pass-through {finals[k]!r} is read after it")
    nscan = len(outs) - n
    scan_axes = [a + 3 if a < 0 else a for a in (attr_value(node, "scan_output_axes") or [0] * nscan)]
    if any(a not in (0, 1) for a in scan_axes):
        raise Refused("a scan output stacks the steps along an axis other than 0 or 1")
    return _finish(node, scope, outer, x, axis, names[n], states, names, outs, inits, finals, outs[n:],
                   list(node.output[n:]), scan_axes, shapes)
