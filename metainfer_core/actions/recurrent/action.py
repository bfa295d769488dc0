"""Recurrent loops  =>  ONNX's fused LSTM / GRU / RNN operators (lossless), all the loops of the
graph it proves in one site.

Keras recurrent layers exported by tf2onnx often arrive as a `Loop` (or `Scan`) whose body is the
cell written out (MatMul, Add, Split, Sigmoid, Tanh, Mul, the counter and the condition): ONNX
Runtime then runs a subgraph per step per layer, about twice the time of the fused operator on a
CPU. A loop is rewritten only when its form is proved from the graph (loops.py, cells.py): the
steps read one sequence at the iteration counter, the trip count is the sequence's length and the
condition holds on every step (or, as tf2onnx writes a while loop, there is no trip count and the
condition is proved to end the loop right after the last step), the body computes an LSTM, GRU or simple RNN cell with constant
weights and nothing else, and the scan outputs are the new hidden state. Anything else is a site
`legal` refuses with the reason (a peephole, a dropout mask, a custom activation, a state read
outside the cell, a trip count or condition that may end before the sequence): the search log
shows it. The sequence length stays symbolic where the input's is."""
from __future__ import annotations

import onnx

from metainfer_core.actions.base import Action, Site, cached, commit_rewrite, missing_ops, opset_of
from metainfer_core.actions.recurrent.loops import Recurrence, loop_form, scan_form
from metainfer_core.actions.recurrent.rewrite import ops_added, replacement
from metainfer_core.actions.recurrent.values import Refused, Scope
from metainfer_core.ir.graph_utils import attr_value, clone, node_reads, tensor_shapes

LOOPS = ("Loop", "Scan")


def _key(node: onnx.NodeProto) -> str:
    return node.name or node.output[0]


def _looks_recurrent(node: onnx.NodeProto) -> bool:
    """A Loop / Scan worth a proof: its body multiplies by a matrix and reads a carried value."""
    body = attr_value(node, "body")
    if body is None:
        return False
    carried = [i.name for i in body.input][2:] if node.op_type == "Loop" else \
        [i.name for i in body.input][:len(node.input) - (attr_value(node, "num_scan_inputs") or 0)]
    return any(n.op_type in ("MatMul", "Gemm") for n in body.node) and any(
        set(n.input) & set(carried) for n in body.node if n.op_type in ("MatMul", "Gemm", "Mul", "Add"))


def _analyze(model: onnx.ModelProto) -> dict[str, Recurrence | str]:
    """Each recurrent-looking Loop / Scan of the main graph: its proved form, or why not."""
    found: dict[str, Recurrence | str] = {}
    candidates = [n for n in model.graph.node if n.op_type in LOOPS and n.domain in ("", "ai.onnx") and _looks_recurrent(n)]
    if not candidates:
        return found
    try:
        shapes = tensor_shapes(onnx.shape_inference.infer_shapes(model).graph)
    except Exception:                 # shapes unknown: every loop below refuses for want of a rank
        shapes = tensor_shapes(model.graph)
    outer, opset = Scope(model.graph), opset_of(model)
    for node in candidates:
        try:
            if opset < 9:
                raise Refused(f"opset {opset} predates the forms this rewrite proves (9)")
            found[_key(node)] = (loop_form if node.op_type == "Loop" else scan_form)(outer, shapes, node)
        except Refused as why:
            found[_key(node)] = str(why)
    return found


def analysis(model: onnx.ModelProto) -> dict[str, Recurrence | str]:
    return cached(model, "recurrent", _analyze)


class RecurrentOps(Action):
    name = "recurrent"
    summary = ("a `Loop` / `Scan` whose body computes a Keras-style LSTM, GRU or SimpleRNN cell into ONNX's `LSTM` / "
               "`GRU` / `RNN` (gates re-ordered; Squeezes and Transposes give back the loop's outputs); a loop it "
               "cannot prove equivalent is left alone, with the reason")

    def words(self, params, scope=""):
        return "fused recurrences", (f"run {scope or 'the recurrent loops'} as ONNX's fused recurrent operators "
                                     "instead of a subgraph per step")

    def sites(self, model, params, target):
        found = analysis(model)
        proved = {k: v for k, v in found.items() if isinstance(v, Recurrence)}
        sites = []
        if proved:
            kinds = ", ".join(r.cell.op for r in proved.values())
            sites.append(Site(tuple(proved), f"{len(proved)} loop{'s' if len(proved) > 1 else ''} ({kinds})"))
        sites += [Site((k,), f"loop {k}") for k, v in found.items() if isinstance(v, str)]
        return sites

    def legal(self, model, site, params, target):
        found = analysis(model)
        for k in site.nodes:
            rec = found.get(k)
            if rec is None:
                return f"the loop {k!r} is gone"
            if isinstance(rec, str):
                return f"loop {k!r} left as it is: {rec}"
            missing = missing_ops(target, *ops_added(rec))
            if missing:
                return f"the target does not run {', '.join(missing)}"
        return None

    def apply(self, model, site, params, ctx):
        found = analysis(model)
        out = clone(model)
        graph, opset = out.graph, opset_of(model)
        by_key = {_key(n): n for n in graph.node}
        swap, inits = {}, []
        for k in site.nodes:
            swap[id(by_key[k])], new = replacement(found[k], opset)
            inits += new
        feeding = {name for k in site.nodes for name in node_reads(by_key[k])}
        nodes = [m for n in graph.node for m in swap.get(id(n), [n])]
        del graph.node[:]
        graph.node.extend(nodes)
        commit_rewrite(graph, inits)
        _prune(graph, feeding)
        return out


def _prune(graph: onnx.GraphProto, names: set[str]) -> None:
    """Drop the nodes that only computed what the replaced loops read (trip counts, conditions,
    zero states), and then what only those read; initializers nothing reads go too."""
    outputs = {o.name for o in graph.output}
    while True:
        read = {t for n in graph.node for t in node_reads(n)} | outputs
        dead = [n for n in graph.node if set(n.output) & names and not (set(n.output) & read)]
        if not dead:
            break
        gone = {id(n) for n in dead}
        names = {t for n in dead for t in node_reads(n)}
        kept = [n for n in graph.node if id(n) not in gone]
        del graph.node[:]
        graph.node.extend(kept)
    read = {t for n in graph.node for t in node_reads(n)} | outputs
    kept = [i for i in graph.initializer if i.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept)
