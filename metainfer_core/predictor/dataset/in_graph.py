"""What each kernel of a plan costs inside the whole graph, from the runtime's own profiler
(measured targets whose backend offers `profile_events`: ONNX Runtime).

Micro-benchmarks time a kernel alone; inside a graph the runtime fuses (Conv+Add+Relu become
one node), changes layouts (NCHWc reorders), and keeps caches warm, so standalone times
predict whole-graph times badly. A plan's profile gives one time per runtime node; each is
mapped back to the plan's kernels (plan_graph order) by name:

- a node that kept its ONNX name, or a fused one named `<onnx name>/<fusion>`, is that node;
- a node moved to the blocked layout is named after the tensor it writes, `<tensor>_nchwc`:
  the tensor's producer, or, when the runtime fused an epilogue into it, the node of the
  profiled op type a few producers up (the fused epilogue kernels then cost nothing);
- a node the runtime rewrote keeps the name plus `_token_<n>` (QLinearConv from QDQ);
- a node the runtime made up (Gelu from Div/Erf/Mul, reorders, layout transposes, reshapes
  around a Gemm) goes to the kernels between its mapped neighbours in execution order that no
  node mapped to, shared equally; with none there, to the next mapped kernel (it prepares that
  kernel's input); after the last one, to `unmapped_us` (per-run overhead the correction learns).

The result is stored inside the plan run's `graph` JSON (key `in_graph`), so the library
needs no new table and the kernel model learns in-graph costs beside the micro-benchmarks."""
from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import numpy as np
import onnx

from metainfer_core.backends.ort_backend import end_profiling, node_durations
from metainfer_core.backends.timing import settle_runs
from metainfer_core.ir.kernels import Kernel, group_kernels
from metainfer_core.ir.tensors import tensor_infos
from metainfer_core.predictor.features.graph_context import in_context

KEY = "in_graph"
NCHWC = "_nchwc"
TOKEN = re.compile(r"_token_\d+$")
# profiled rounds over all plans: a profiled run costs many plain ones and each round runs every plan
# SETTLE + 1 times. More rounds rank a little better but lengthen training, which is to stay under
# 2 minutes (docs/decisions/2026-12-05-measured-reasons-from-docstrings.md)
PROFILE_RUNS = 3
QUANTILE = 0.1          # per node over the rounds: the machine's own cost (see labels.py)
FLOOR_US = 0.5          # a kernel fused into another costs nothing of its own; logs need a floor
WALK_BACK = 4           # producers searched for the anchor of a fused `_nchwc` node


def node_times(events: list[dict[str, Any]], skip_first: bool = False, every: int = 1) -> list[tuple[str, str, float]]:
    """(runtime node name, op type, kernel time in us) in execution order; the time is the
    runs' low quantile (QUANTILE), like the whole-model label (labels.py). `skip_first`: the
    first run warmed the session up; `every`: only every `every`-th run after it is a timed
    one (the others settled the caches: timing.interleaved)."""
    per, ops = node_durations(events)
    start = 1 if skip_first else 0
    out = []
    for n, v in per.items():
        timed = v[start + every - 1::every] or v
        out.append((n, ops[n], float(np.quantile(timed, QUANTILE))))
    return out


def _original(name: str, op: str, nodes: dict[str, onnx.NodeProto], producer: dict[str, onnx.NodeProto]) -> str | None:
    name = TOKEN.sub("", name)          # a node the runtime rewrote keeps its name plus `_token_<n>`
    if name in nodes:
        return name
    head = name.split("/", 1)[0]
    if "/" in name and head in nodes:
        return head
    if name.endswith(NCHWC) and name.removesuffix(NCHWC) in producer:
        start = producer[name.removesuffix(NCHWC)]
        frontier, seen = [start], {start.name}
        for _ in range(WALK_BACK):
            for n in frontier:
                if n.op_type == op:
                    return n.name
            frontier = [producer[i] for n in frontier for i in n.input if i in producer
                        and producer[i].name not in seen]
            seen.update(n.name for n in frontier)
        return start.name
    return None


def attribute(model: onnx.ModelProto, kernels: list[Kernel], times: list[tuple[str, str, float]]) -> dict:
    """{"kernel_us": one in-graph time per kernel, "unmapped_us", "nodes": runtime nodes}."""
    nodes = {n.name: n for n in model.graph.node}
    producer = {o: n for n in model.graph.node for o in n.output}
    kernel_of = {name: i for i, k in enumerate(kernels) for name in k.node_names}
    mapped = [kernel_of.get(_original(name, op, nodes, producer) or "") for name, op, _ in times]
    hit = {i for i in mapped if i is not None}
    us = np.zeros(len(kernels))
    unmapped = 0.0
    last = -1
    pending: list[float] = []

    def flush(upto: int) -> None:
        nonlocal unmapped
        gap = [i for i in range(last + 1, upto) if i not in hit]
        if gap:
            us[gap] += sum(pending) / len(gap)
        elif upto < len(kernels):
            us[upto] += sum(pending)
        else:
            unmapped += sum(pending)
        pending.clear()

    for (_, _, t), i in zip(times, mapped):
        if i is None:
            pending.append(t)
            continue
        if pending:
            flush(i)
        us[i] += t
        last = max(last, i)
    if pending:
        flush(len(kernels))
    return {"kernel_us": [float(x) for x in us], "unmapped_us": float(unmapped), "nodes": len(times)}


def profile_plans(backend, models: list[onnx.ModelProto], feeds: list[dict[str, np.ndarray]],
                  runs: int = PROFILE_RUNS) -> list[dict | None]:
    """Each plan's in-graph kernel times (attribute), profiled in interleaved rounds of warm runs
    like the timed runs; None for every plan when the backend has no profiler (modeled targets: inside
    a graph their kernels cost what the simulator says) and for a plan that fails to run."""
    if not hasattr(backend, "profile_events") or not hasattr(backend, "new_session") or runs <= 0:
        return [None] * len(models)
    sessions = []
    for m, f in zip(models, feeds):
        try:
            sess = backend.new_session(m.SerializeToString(), profile=True)
            sess.run(None, f)
            sessions.append(sess)
        except Exception:  # noqa: BLE001 - a plan that cannot be profiled is still a whole-model run
            sessions.append(None)
    settle = settle_runs(backend)
    for _ in range(runs):
        for sess, f in zip(sessions, feeds):
            if sess is not None:
                for _ in range(settle + 1):
                    sess.run(None, f)
    out: list[dict | None] = []
    for m, sess in zip(models, sessions):
        if sess is None:
            out.append(None)
            continue
        times = node_times(end_profiling(sess), skip_first=True, every=settle + 1)
        out.append(attribute(m, group_kernels(m, tensor_infos(m)), times) if times else None)
    return out


def run_overhead_us(plan_runs: list[dict]) -> float:
    """What a run costs outside its profiled nodes (entering the session, copying inputs and
    outputs): the intercept c of whole ~ c + a * profiled sum + b * runtime nodes over the
    profiled runs (least squares on relative error), within [0, the fastest run]."""
    rows, whole = [], []
    for r in plan_runs:
        profiled = r.get("graph", {}).get(KEY)
        if profiled:
            rows.append([1.0, sum(profiled["kernel_us"]) + profiled["unmapped_us"], float(profiled["nodes"])])
            whole.append(_whole_us(r))
    if len(whole) < 3:
        return 0.0
    y = np.array(whole)
    coef, *_ = np.linalg.lstsq(np.array(rows) / y[:, None], np.ones(len(y)), rcond=None)
    return float(np.clip(coef[0], 0.0, y.min()))


def _whole_us(run: dict) -> float:
    """The run's label (labels.py: the low percentile on a measured target, the only kind with profiles)."""
    return 1e3 * float(run.get("p10_ms") or run["median_ms"])


def to_whole(profiled: dict, whole_us: float, overhead_us: float) -> np.ndarray:
    """A run's kernel times made to add up to the run itself minus its overhead: the profiler
    adds a few us to every node it times (run_overhead_us; a deep model's profile can sum to well
    over its run), so the excess comes off the kernels that have a time, equally, and what
    remains is scaled to the run's own time (better leave-one-model-out MAPE and rank
    correlation on cpu: docs/decisions/2026-12-05-measured-reasons-from-docstrings.md)."""
    us = np.array(profiled["kernel_us"], dtype=np.float64)
    target = max(whole_us - overhead_us, FLOOR_US)
    timed = us > FLOOR_US
    excess = us.sum() + profiled["unmapped_us"] - target
    if excess > 0 and timed.any():
        us[timed] = np.maximum(us[timed] - excess / timed.sum(), FLOOR_US)
    total = us.sum() + profiled["unmapped_us"]
    return us * (target / total) if total > 0 else us


def training_rows(plan_runs: list[dict]) -> tuple[list[dict], np.ndarray]:
    """(kernel descriptors in their graph context, in-graph latency ms) from the runs that
    carry a profile (to_whole: adding up to each run's own time): one row per distinct kernel
    and context, the median over the plans."""
    times: dict[tuple, list[float]] = defaultdict(list)
    descs: dict[tuple, dict] = {}
    overhead = run_overhead_us(plan_runs)
    for r in plan_runs:
        profiled = r.get("graph", {}).get(KEY)
        if not profiled or len(profiled["kernel_us"]) != len(r["graph"]["kernels"]):
            continue
        for d, us in zip(in_context(r["graph"]["kernels"]), to_whole(profiled, _whole_us(r), overhead)):
            key = (d["key"], d["context"], d["producer"], d["consumer"], d["producer_fan_out"], d["act_signed"],
                   d["log_region_in"], d["log_region_out"])
            times[key].append(us)
            descs.setdefault(key, d)
    keys = list(descs)
    ms = np.array([max(float(np.median(times[k])), FLOOR_US) / 1e3 for k in keys])
    return [descs[k] for k in keys], ms
