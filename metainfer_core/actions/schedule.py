"""Compute/copy overlap scheduling (lossless, numerics untouched). Two decisions:

order=memory:   the kernels are re-ordered (a different valid topological order of the nodes)
                so that, among the kernels ready to run, the one that frees the most bytes
                (outputs allocated minus inputs released) goes first: branches finish before
                others start, and the liveness peak drops. Recorded as `metainfer.schedule`.
double_buffer:  host<->device transfers (tensors of kernels bound to the host) use two
                staging buffers, so a transfer streams while the previous kernel computes
                (model metadata `metainfer.double_buffer=1`); the simulator hides the
                overlapped part of the link time and the planner adds the second buffer. On a
                device that streams weights from flash, the next kernel's weights load the same
                way (a second weight buffer).

Illegal on a measured ONNX Runtime target, whose executor chooses its own order and copies."""
from __future__ import annotations


import onnx

from metainfer_core.actions.base import Action, Param, Site, infos_of, kernels_of
from metainfer_core.ir.directives import BIND_KEY, DOUBLE_BUFFER_KEY, SCHEDULE_KEY, model_meta, node_meta, set_model_meta
from metainfer_core.ir.graph_utils import clone, set_repeated
from metainfer_core.ir.kernels import is_adapter, is_precision_cast


def memory_order(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Nodes kernel by kernel, each next kernel the ready one with the least net allocation
    (the nodes of `model`; its analysis is cached, so it must not be edited afterwards)."""
    infos = infos_of(model)
    kernels = kernels_of(model)
    producer = {t: i for i, k in enumerate(kernels) for t in k.outputs}
    deps = [{producer[t] for t in k.inputs if t in producer and producer[t] != i} for i, k in enumerate(kernels)]
    users: dict[int, list[int]] = {i: [] for i in range(len(kernels))}
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    uses: dict[str, int] = {}
    for k in kernels:
        for t in k.inputs:
            uses[t] = uses.get(t, 0) + 1
    size = {t: infos[t].nbytes for t in infos}
    outs = {o.name for o in model.graph.output}

    def net(i: int) -> int:
        k = kernels[i]
        freed = sum(size.get(t, 0) for t in set(k.inputs) if uses.get(t) == 1 and t not in outs)
        return sum(size.get(t, 0) for t in k.outputs) - freed

    waiting = [len(d) for d in deps]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    order = []
    while ready:
        i = min(ready, key=lambda j: (net(j), j))
        ready.remove(i)
        order.append(i)
        for t in set(kernels[i].inputs):
            uses[t] = uses.get(t, 1) - 1
        for j in users[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.append(j)
    if len(order) != len(kernels):
        return list(model.graph.node)
    position = {id(n): p for p, n in enumerate(model.graph.node)}
    nodes = [n for i in order for n in sorted(kernels[i].nodes, key=lambda n: position[id(n)])]
    # kernels are convex, but check: every input must exist before its reader
    have = {i.name for i in model.graph.input} | {i.name for i in model.graph.initializer} | {""}
    for n in nodes:
        if not set(n.input) <= have:
            return list(model.graph.node)
        have.update(n.output)
    return nodes if len(nodes) == len(model.graph.node) else list(model.graph.node)


def may_cross_link(model: onnx.ModelProto, target) -> bool:
    """Cheap test: some node the device cannot run (or pinned to the host), so tensors will
    cross the host link."""
    if any(node_meta(n, BIND_KEY) == "host" for n in model.graph.node):
        return True
    if target.supported_ops is None and "float32" in target.dtypes:
        return False
    ops = set(target.supported_ops) if target.supported_ops is not None else None
    for n in model.graph.node:
        if is_adapter(n) or is_precision_cast(n):
            continue
        if ops is not None and n.op_type not in ops:
            return True
    f32 = any(i.data_type == onnx.TensorProto.FLOAT for i in model.graph.initializer)
    return "float32" not in target.dtypes and f32


class Schedule(Action):
    name = "schedule"
    summary = ("execution order for a lower liveness peak; double-buffered host/device transfers on modeled targets, "
               "and on the `npu` the next kernel's weights prefetched from flash while the current one runs (a "
               "second weight buffer)")
    params = {
        "order": Param("keep", ("keep", "memory"), "keep the execution order, or the memory-aware one"),
        "double_buffer": Param(False, (False, True),
                               "overlap host<->device transfers and streamed weight loads with compute"),
    }


    def words(self, params, scope=""):
        on = (params.get("order") == "memory", bool(params.get("double_buffer")))
        short = " + ".join(w for w, x in zip(("memory-aware order", "double buffering"), on) if x)
        long = "; ".join(w for w, x in zip(("reorder kernels to lower the peak memory",
                                             "overlap host-device transfers with compute"), on) if x)
        return short or "schedule", long or "keep the schedule"

    def sites(self, model, params, target):
        if params["order"] == "keep" and not params["double_buffer"]:
            return []
        if params["order"] == "memory" and (model_meta(model, SCHEDULE_KEY) == "memory" or not _branches(model)):
            return []
        streams = bool(target.extra.get("weights_streamed")) and len(model.graph.initializer) > 0
        if params["double_buffer"] and (model_meta(model, DOUBLE_BUFFER_KEY) == "1"
                                        or not (streams or may_cross_link(model, target))):
            return []
        return [Site((), f"order={params['order']},double_buffer={params['double_buffer']}")]

    def legal(self, model, site, params, target):
        if not target.extra.get("schedulable"):
            return f"target {target.name} schedules kernels and copies itself (ONNX Runtime's executor)"
        return None

    def keeps_graph(self, params):
        return params["order"] == "keep"

    def apply(self, model, site, params, ctx):
        out = clone(model)
        if params["order"] == "memory":
            order = [n.name for n in memory_order(model)]
            if order != [n.name for n in model.graph.node]:
                by_name = {n.name: n for n in out.graph.node}
                set_repeated(out.graph.node, [by_name[name] for name in order])
                set_model_meta(out, SCHEDULE_KEY, "memory")
        if params["double_buffer"]:
            set_model_meta(out, DOUBLE_BUFFER_KEY, "1")
        return out


def _branches(model: onnx.ModelProto) -> bool:
    """A tensor read by two nodes: there is more than one valid order to choose from."""
    seen: set[str] = set()
    for n in model.graph.node:
        for i in n.input:
            if i in seen:
                return True
        seen.update(i for i in n.input if i)
    return False
