"""Shared helpers for main-graph rewrites.

Rewrites change the main graph only. Subgraphs (If/Loop/Scan bodies) are read to learn which
outer-scope tensors they use, and their references are renamed when such a tensor is forwarded, so
a body never loses a tensor it reads. ONNX forbids a subgraph from redefining an outer name (SSA
across scopes), which is why renaming inside bodies needs no shadowing rules.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator

import numpy as np
import onnx
from onnx import numpy_helper

from metainfer_core.errors import MetaInferError

# Ops whose result changes from run to run: never folded, never merged.
NON_DETERMINISTIC = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
)

AI_ONNX = ("", "ai.onnx")  # the two spellings of the default domain

Shape = list[int | str | None]  # int: static dim, str: symbolic dim, None: unknown dim


def clone(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def with_outputs(model: onnx.ModelProto, names: dict[str, int]) -> onnx.ModelProto:
    """A copy of the model with the named tensors (name -> ONNX element type) among its graph
    outputs, shapes left to the runtime."""
    out = clone(model)
    have = {o.name for o in out.graph.output}
    out.graph.output.extend(onnx.helper.make_tensor_value_info(t, dtype, None)
                            for t, dtype in names.items() if t not in have)
    return out


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    graphs: list[onnx.GraphProto] = []
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            graphs.append(attr.g)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            graphs.extend(attr.graphs)
    return graphs


def iter_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """The graph and every subgraph nested in it, depth first."""
    yield graph
    for node in graph.node:
        for sub in subgraphs(node):
            yield from iter_graphs(sub)


def outer_scope_names(graph: onnx.GraphProto) -> set[str]:
    """Names a subgraph (or anything nested in it) reads without defining them."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    used = {o.name for o in graph.output}
    for node in graph.node:
        defined.update(node.output)
        used.update(node.input)
        for sub in subgraphs(node):
            used |= outer_scope_names(sub)
    return used - defined - {""}


def is_op(node: onnx.NodeProto | None, op_type: str) -> bool:
    """A node of the given ai.onnx op type (None, the producer of a graph input, is none)."""
    return node is not None and node.op_type == op_type and node.domain in AI_ONNX


def describe(node: onnx.NodeProto) -> str:
    """How an error names a node: its name, or what it produces when it has none."""
    if node.name:
        return f"'{node.name}'"
    return f"(unnamed, producing '{next((o for o in node.output if o), '')}')"


def attr_value(node: onnx.NodeProto, name: str, default=None):  # type: ignore[no-untyped-def]
    for attr in node.attribute:
        if attr.name == name:
            return onnx.helper.get_attribute_value(attr)
    return default


def transpose_perm(node: onnx.NodeProto, rank: int | None) -> list[int] | None:
    """A Transpose's permutation; without the attribute it reverses the axes (needs the rank)."""
    perm = attr_value(node, "perm")
    if perm is not None:
        return list(perm)
    return None if rank is None else list(reversed(range(rank)))


def node_reads(node: onnx.NodeProto) -> set[str]:
    """Every tensor a node reads: its inputs and the outer-scope names its subgraphs use."""
    names = set(node.input) - {""}
    for sub in subgraphs(node):
        names |= outer_scope_names(sub)
    return names


def _rename_reads(graph: onnx.GraphProto, old: str, new: str) -> None:
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
        for sub in subgraphs(node):
            _rename_reads(sub, old, new)
    for out in graph.output:  # a body may return an outer tensor directly
        if out.name == old:
            out.name = new


def tensor_shapes(graph: onnx.GraphProto) -> dict[str, Shape | None]:
    """Known tensor shapes of the main graph (None: rank unknown), from value_info and the signature."""
    shapes: dict[str, Shape | None] = {}
    for vi in [*graph.value_info, *graph.input, *graph.output]:
        tensor_type = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not tensor_type.HasField("shape"):
            shapes.setdefault(vi.name, None)
            continue
        dims: Shape = []
        for d in tensor_type.shape.dim:
            dims.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or None))
        shapes[vi.name] = dims
    for t in graph.initializer:
        shapes[t.name] = list(t.dims)
    return shapes


def static_shape(shape: Shape | None) -> list[int] | None:
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return shape  # type: ignore[return-value]


class GraphIndex:
    """Producers, consumers and constants of a main graph, kept current while a pass edits it.

    A pass edits nodes in place (they belong to the graph), calls `forward` / `remove` /
    `add_initializer`, then `commit`, which writes the surviving nodes back and prunes what died.
    """

    def __init__(self, graph: onnx.GraphProto):
        self.graph = graph
        self.nodes = list(graph.node)
        self.outputs = {o.name for o in graph.output}
        self.inputs = {i.name for i in graph.input}
        self.initializers = {t.name: t for t in graph.initializer}
        self.shapes = tensor_shapes(graph)
        self.producer: dict[str, onnx.NodeProto] = {}
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        self._removed: set[int] = set()
        self._names = {n for g in iter_graphs(graph) for n in _defined_names(g)}
        for node in self.nodes:
            self._index(node)

    def _index(self, node: onnx.NodeProto) -> None:
        for name in node.output:
            if name:
                self.producer[name] = node
        for name in node_reads(node):
            self.readers.setdefault(name, []).append(node)

    def is_constant(self, name: str) -> bool:
        """An initializer that no graph input can override."""
        return name in self.initializers and name not in self.inputs

    def constant(self, name: str) -> np.ndarray | None:
        return numpy_helper.to_array(self.initializers[name]) if self.is_constant(name) else None

    def consumers(self, name: str) -> list[onnx.NodeProto]:
        """Live nodes reading `name` (an edited node may have stopped reading it)."""
        live = {id(n): n for n in self.readers.get(name, []) if id(n) not in self._removed}
        return [n for n in live.values() if name in node_reads(n)]

    def sole_consumer(self, name: str) -> onnx.NodeProto | None:
        """The only node reading `name`, when `name` is also not a graph output."""
        users = self.consumers(name)
        if name in self.outputs or len(users) != 1:
            return None
        return users[0]

    def fresh_name(self, base: str) -> str:
        name, i = base, 0
        while name in self._names:
            i += 1
            name = f"{base}_{i}"
        self._names.add(name)
        return name

    def add_initializer(self, array: np.ndarray, name: str) -> str:
        self.graph.initializer.append(numpy_helper.from_array(np.asarray(array), name))
        self.initializers[name] = self.graph.initializer[-1]
        self._names.add(name)
        return name

    def set_input(self, node: onnx.NodeProto, slot: int, name: str) -> None:
        while len(node.input) <= slot:
            node.input.append("")
        node.input[slot] = name
        self.readers.setdefault(name, []).append(node)

    def set_output(self, node: onnx.NodeProto, slot: int, name: str) -> None:
        """Rename what `node` produces (its old output must have no other readers)."""
        self.producer.pop(node.output[slot], None)
        node.output[slot] = name
        self.producer[name] = node

    def can_forward(self, old: str, new: str) -> bool:
        """See `forward`: a graph output keeps its name only if `new` can be renamed to it."""
        return old not in self.outputs or (new not in self.outputs and new in self.producer)

    def forward(self, old: str, new: str) -> bool:
        """Make every reader of `old` read `new`; the caller then removes the producer of `old`.

        When `old` is a graph output its name must survive, so `new` is renamed to `old` instead;
        that needs `new` to come from a node and to be no graph output itself. Returns False, with
        nothing changed, when neither way is possible.
        """
        if not self.can_forward(old, new):
            return False
        if old in self.outputs:
            producer = self.producer[new]
            self.set_output(producer, list(producer.output).index(new), old)
            old, new = new, old  # from here on: readers of the producer's old name read `old`
        for node in {id(n): n for n in self.consumers(old)}.values():
            for i, name in enumerate(node.input):
                if name == old:
                    node.input[i] = new
            for sub in subgraphs(node):
                _rename_reads(sub, old, new)
            self.readers.setdefault(new, []).append(node)
        self.readers[old] = []
        return True

    def remove(self, node: onnx.NodeProto) -> None:
        self._removed.add(id(node))

    def is_removed(self, node: onnx.NodeProto) -> bool:
        return id(node) in self._removed

    def commit(self) -> None:
        """Write back the surviving nodes, then drop dead nodes, initializers and value_info."""
        alive = [n for n in self.nodes if id(n) not in self._removed]
        producer = {o: n for n in alive for o in n.output if o}
        needed: set[str] = set()
        stack = list(self.outputs)
        while stack:
            name = stack.pop()
            if name in needed:
                continue
            needed.add(name)
            if name in producer:
                stack.extend(node_reads(producer[name]))
        kept = [n for n in alive if any(o in needed for o in n.output)]
        produced = {o for n in kept for o in n.output}
        value_info = [vi for vi in self.graph.value_info if vi.name in produced]
        initializers = [t for t in self.graph.initializer if t.name in needed or t.name in self.inputs]
        set_repeated(self.graph.node, kept)
        set_repeated(self.graph.value_info, value_info)
        set_repeated(self.graph.initializer, initializers)


def sweep(model: onnx.ModelProto, rule: Callable[[GraphIndex, onnx.NodeProto], int]) -> tuple[onnx.ModelProto, int]:
    """Apply `rule` to each live main-graph node in order, on a copy of `model`; `rule` edits
    through the index and returns how many rewrites it made. Returns the copy and the total."""
    model = clone(model)
    index = GraphIndex(model.graph)
    changes = sum(rule(index, node) for node in index.nodes if not index.is_removed(node))
    index.commit()
    return model, changes


def _defined_names(graph: onnx.GraphProto) -> set[str]:
    names = {v.name for v in [*graph.input, *graph.output, *graph.value_info]}
    names |= {t.name for t in graph.initializer}
    for node in graph.node:
        names.update(node.output)
    return names


def set_repeated(field, items: list) -> None:  # type: ignore[no-untyped-def]
    """Replace a repeated proto field's contents (items may be the field's own elements)."""
    items = list(items)  # detached from `field` when it is cleared, then copied back in
    del field[:]
    field.extend(items)


# Kept over onnx_ir's Graph.sort: the same job, but its IR round trip costs many times this sort, and a cycle must name its node.
def topological_sort(model: onnx.ModelProto) -> onnx.ModelProto:
    """Main-graph nodes ordered so each follows the producers of what it reads; stable: among
    ready nodes the earliest comes first, so an already valid order is kept as it is."""
    model = clone(model)
    nodes = list(model.graph.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    waiting = [{producer[name] for name in node_reads(n) if name in producer} for n in nodes]
    dependents: list[list[int]] = [[] for _ in nodes]
    for i, deps in enumerate(waiting):
        for d in deps:
            dependents[d].append(i)
    ready = [i for i, deps in enumerate(waiting) if not deps]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in dependents[i]:
            waiting[j].discard(i)
            if not waiting[j]:
                heapq.heappush(ready, j)
    if len(order) < len(nodes):
        stuck = next(n for i, n in enumerate(nodes) if waiting[i])
        raise MetaInferError(
            f"The graph has a cycle through node {describe(stuck)} ({stuck.op_type}), so it cannot be "
            "ordered for execution; an ONNX graph must be acyclic: re-export the model."
        )
    set_repeated(model.graph.node, [nodes[i] for i in order])
    return model
