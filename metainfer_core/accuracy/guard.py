"""Accuracy guard for low-precision plans (SPEC section 3, "accuracy jitter").

When a plan with a lossy step breaks the accuracy bound: diff what every node reads against
what its twin in the fp32 graph reads, to see where the low-precision rewrite lets error in;
pin the worst node to fp32 (replay the plan with that node taken out of the lossy step's
scope), re-evaluate, and repeat within a budget of re-evaluations."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from metainfer_core.accuracy.metric import LossFn, plan_loss, run_cpu
from metainfer_core.accuracy.tensor_error import channel_error
from metainfer_core.actions import ACTIONS, ActionContext, Site, Step
from metainfer_core.ir.kernels import QDQ_OPS
from metainfer_core.ir.runs import exposed_runs
from metainfer_core.ir.tensors import tensor_infos


@dataclass
class Repair:
    steps: tuple[Step, ...]
    model: onnx.ModelProto | None
    culprits: list[str]
    loss_before: float
    loss_after: float
    evaluations: int
    ranking: list[tuple[str, float]] = field(default_factory=list)   # node, error it introduces

    @property
    def ok(self) -> bool:
        return self.model is not None


def _values(model: onnx.ModelProto, names: list[str], feeds: list[dict]) -> dict[str, list[np.ndarray]]:
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    wanted = [n for n in names if n not in inits]
    infos = tensor_infos(model)
    outputs = {o.name for o in model.graph.output}
    present = [n for n in wanted if n in infos or n in outputs]
    runs = list(exposed_runs(model, present, feeds, {n: helper.np_dtype_to_tensor_dtype(infos[n].dtype)
                                                     for n in present if n in infos}, optimization=None))
    vals = {n: [r[j] for r in runs] for j, n in enumerate(present)}
    vals.update({n: [inits[n]] * len(feeds) for n in names if n in inits})
    return vals


def node_errors(fp32: onnx.ModelProto, lossy: onnx.ModelProto, feeds: list[dict]) -> dict[str, float]:
    """Error each lossy node lets in through its own inputs: for every input the low-precision
    rewrite re-routed (through QuantizeLinear/DequantizeLinear or a Cast), the channel error of
    what the node now reads against what its fp32 twin (same node name) reads, minus the error
    already present before that conversion."""
    twins = {n.name: n for n in fp32.graph.node}
    producer = {o: n for n in lossy.graph.node for o in n.output}
    pairs: list[tuple[str, str, str | None, str]] = []      # node, lossy input, pre-conversion tensor, fp32 input
    for n in lossy.graph.node:
        f = twins.get(n.name)
        if n.op_type in QDQ_OPS or f is None:
            continue
        for t, tf in zip(n.input, f.input):
            if not t or t == tf:
                continue
            p = producer.get(t)
            before = None
            if p is not None and p.op_type in ("DequantizeLinear", "Cast"):
                q = producer.get(p.input[0])
                before = q.input[0] if q is not None and q.op_type == "QuantizeLinear" else None
            pairs.append((n.name, t, before, tf))
    lossy_vals = _values(lossy, sorted({t for _, t, _, _ in pairs} | {b for _, _, b, _ in pairs if b}), feeds)
    fp32_vals = _values(fp32, sorted({tf for *_, tf in pairs}), feeds)
    scores: dict[str, float] = {n.name: 0.0 for n in lossy.graph.node if n.op_type not in QDQ_OPS}

    def err(name: str | None, tf: str) -> float:
        if name is None or name not in lossy_vals or tf not in fp32_vals:
            return 0.0
        return max(channel_error(r, o) for r, o in zip(fp32_vals[tf], lossy_vals[name]))

    for node, t, before, tf in pairs:
        scores[node] = max(scores[node], err(t, tf) - err(before, tf))
    return scores


def _replay(fp32: onnx.ModelProto, steps: tuple[Step, ...], pinned: set[str], ctx: ActionContext) -> tuple[tuple[Step, ...], onnx.ModelProto]:
    model, new_steps = fp32, []
    for st in steps:
        site = st.site
        if ACTIONS[st.kind].lossy and pinned:
            site = Site(tuple(n for n in site.nodes if n not in pinned), f"{site.label}-pinned")
        model = ACTIONS[st.kind].apply(model, site, dict(st.params), ctx)
        new_steps.append(Step(st.kind, site, st.params))
    return tuple(new_steps), model


def repair(fp32: onnx.ModelProto, steps: tuple[Step, ...], lossy_model: onnx.ModelProto, ctx: ActionContext,
           feeds: list[dict], reference: list[list[np.ndarray]], max_loss: float, budget: int = 8,
           loss_fn: LossFn = plan_loss) -> Repair:
    """Pin the node that lets in the most error, re-evaluate, and repeat (the ranking is
    recomputed each round: pinning one node moves where error enters) until the plan meets
    the bound or `budget` re-evaluations are spent."""
    loss_before = loss_fn(reference, run_cpu(lossy_model, feeds))
    scoped = {n for st in steps if ACTIONS[st.kind].lossy for n in st.site.nodes}
    model, new_steps, loss = lossy_model, steps, loss_before
    pinned: list[str] = []
    first_ranking: list[tuple[str, float]] = []
    evaluations = 0
    while loss > max_loss and evaluations < budget:
        errors = node_errors(fp32, model, feeds)
        ranking = sorted(((n, e) for n, e in errors.items() if n in scoped and n not in pinned and e > 0),
                         key=lambda x: -x[1])
        first_ranking = first_ranking or ranking
        if not ranking:
            break
        pinned.append(ranking[0][0])
        new_steps, model = _replay(fp32, steps, set(pinned), ctx)
        loss = loss_fn(reference, run_cpu(model, feeds))
        evaluations += 1
    ok = loss <= max_loss
    return Repair(new_steps if ok else steps, model if ok else None, pinned, loss_before, loss, evaluations,
                  first_ranking)
