"""Peak-memory planner: tensor liveness over the execution order, and the buffer-sharing
policy that lays the live tensors out in one arena.

Weights stay resident, unless the device streams them from external memory: then only the
running kernel's weights occupy device memory (`streamed_weights`: the largest kernel's; with
double buffering the next kernel's load is in flight too: the largest consecutive pair's). An activation
lives from the kernel that produces it until its last consumer has run (graph outputs until
the end). Policies (a model may record its own in metadata `metainfer.memory_strategy`;
otherwise the target's runtime default applies):

- `none`: no sharing, every tensor its own buffer: the sum of all activations.
- `greedy`: greedy by size (TFLite's arena planner): largest tensors first, each at the lowest
  offset that overlaps no placed tensor alive at the same time.
- `first_fit`: in execution order, each tensor at the lowest free gap of the arena when it is
  produced (what a simple arena allocator does at run time).

Both offset policies are at least `live_peak` (the most bytes alive at once, what an ideal
allocator without fragmentation would need); how much more depends on the graph."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import onnx

from metainfer_core.ir.directives import STRATEGY_KEY, model_meta
from metainfer_core.ir.kernels import Kernel
from metainfer_core.ir.tensors import TensorInfo

STRATEGIES = ("none", "greedy", "first_fit")
DEFAULT_STRATEGY = "greedy"


@dataclass
class Buffer:
    name: str
    size: int
    start: int          # first step it is alive
    end: int            # last step it is alive (inclusive)
    offset: int = 0


@dataclass
class MemoryPlan:
    strategy: str
    weights_bytes: int
    arena_bytes: int                # activations laid out by the policy
    live_peak_bytes: int            # lower bound: most activation bytes alive at one step
    extra_bytes: int = 0            # e.g. a second staging buffer for double-buffered transfers
    buffers: list[Buffer] = field(default_factory=list)

    @property
    def peak_bytes(self) -> int:
        return self.weights_bytes + self.arena_bytes + self.extra_bytes


def model_strategy(model: onnx.ModelProto, default: str = DEFAULT_STRATEGY) -> str:
    """The policy the model records, else `default` (the target runtime's own)."""
    recorded = model_meta(model, STRATEGY_KEY)
    return default if recorded is None else recorded


def _size(info: TensorInfo) -> int:
    return math.prod(info.shape) * info.dtype.itemsize


def buffers(kernels: list[Kernel], infos: dict[str, TensorInfo], graph_inputs: list[str],
            graph_outputs: set[str] | None = None) -> list[Buffer]:
    """Every activation with its lifetime in kernel steps (graph inputs are alive from step 0)."""
    last = len(kernels) - 1
    last_use: dict[str, int] = {}
    for step, k in enumerate(kernels):
        for t in k.inputs:
            last_use[t] = step
    outs = graph_outputs if graph_outputs is not None else set()
    bufs = {t: Buffer(t, _size(infos[t]), 0, last_use.get(t, 0)) for t in graph_inputs if t in infos}
    for step, k in enumerate(kernels):
        for t in k.outputs:
            if t in infos and t not in bufs:
                end = last if t in outs else max(last_use.get(t, step), step)
                bufs[t] = Buffer(t, _size(infos[t]), step, end)
    return list(bufs.values())


def live_peak(bufs: list[Buffer], steps: int) -> int:
    delta = [0] * (steps + 2)
    for b in bufs:
        delta[b.start] += b.size
        delta[b.end + 1] -= b.size
    peak = cur = 0
    for d in delta:
        cur += d
        peak = max(peak, cur)
    return peak


def _lowest_fit(size: int, taken: list[tuple[int, int]]) -> int:
    """Lowest offset where [off, off+size) overlaps none of the (offset, end) ranges."""
    off = 0
    for lo, hi in sorted(taken):
        if off + size <= lo:
            break
        off = max(off, hi)
    return off


def _place_greedy_by_size(bufs: list[Buffer], steps: int) -> int:
    at_step: list[list[Buffer]] = [[] for _ in range(steps + 1)]
    arena = 0
    for b in sorted(bufs, key=lambda b: (-b.size, b.start, b.name)):
        overlapping = {id(o): o for s in range(b.start, b.end + 1) for o in at_step[s]}
        b.offset = _lowest_fit(b.size, [(o.offset, o.offset + o.size) for o in overlapping.values()])
        for s in range(b.start, b.end + 1):
            at_step[s].append(b)
        arena = max(arena, b.offset + b.size)
    return arena


def _place_first_fit(bufs: list[Buffer]) -> int:
    live: list[Buffer] = []
    arena = 0
    for b in sorted(bufs, key=lambda b: (b.start, b.name)):
        live = [o for o in live if o.end >= b.start]
        b.offset = _lowest_fit(b.size, [(o.offset, o.offset + o.size) for o in live])
        live.append(b)
        arena = max(arena, b.offset + b.size)
    return arena


def plan_memory(kernels: list[Kernel], infos: dict[str, TensorInfo], graph_inputs: list[str],
                strategy: str = DEFAULT_STRATEGY, graph_outputs: set[str] | None = None,
                include_weights: bool = True, extra_bytes: int = 0, streamed_weights: bool = False,
                double_buffer: bool = False) -> MemoryPlan:
    if strategy not in STRATEGIES:
        raise ValueError(f"memory strategy {strategy!r} is not one of {STRATEGIES}")
    if streamed_weights:      # loaded kernel by kernel: the largest kernel's weights at a time
        per = [sum(_size(infos[w]) for w in k.weights if w in infos) for k in kernels]
        pairs = [a + b for a, b in zip(per, per[1:])] if double_buffer else []
        weights = max(pairs or per or [0])
    else:
        weights = sum(_size(infos[w]) for w in {w for k in kernels for w in k.weights} if w in infos)
    bufs = buffers(kernels, infos, graph_inputs, graph_outputs)
    steps = max(len(kernels), 1)
    lower = live_peak(bufs, steps)
    if strategy == "none":
        offset = 0
        for b in bufs:
            b.offset, offset = offset, offset + b.size
        arena = offset
    elif strategy == "greedy":
        arena = _place_greedy_by_size(bufs, steps)
    else:
        arena = _place_first_fit(bufs)
    return MemoryPlan(strategy, weights if include_weights else 0, arena, lower, extra_bytes, bufs)


def peak_memory_bytes(kernels: list[Kernel], infos: dict[str, TensorInfo], graph_inputs: list[str],
                      strategy: str = DEFAULT_STRATEGY, graph_outputs: set[str] | None = None,
                      include_weights: bool = True, extra_bytes: int = 0, streamed_weights: bool = False,
                      double_buffer: bool = False) -> int:
    return plan_memory(kernels, infos, graph_inputs, strategy, graph_outputs, include_weights, extra_bytes,
                       streamed_weights, double_buffer).peak_bytes


def peak_reason(plan: MemoryPlan, kernels: list[Kernel], limit: int,
                infos: dict[str, TensorInfo] | None = None) -> str:
    """Which tensors make `plan`'s peak, in words: the step where the most activation bytes are
    alive, the largest of them, and the weights held beside them (the heaviest kernel's largest
    weight tensor named, when `infos` gives the sizes)."""
    steps = max(len(kernels), 1)
    live = [0] * steps
    for b in plan.buffers:
        for s in range(b.start, min(b.end, steps - 1) + 1):
            live[s] += b.size
    step = max(range(steps), key=lambda s: live[s])
    at = sorted((b for b in plan.buffers if b.start <= step <= b.end), key=lambda b: (-b.size, b.name))
    where = f"{kernels[step].op_type} kernel {kernels[step].node_names[0]!r}" if kernels else "the graph"
    named = ", ".join(f"{b.name!r} ({b.size} B)" for b in at[:3])
    single = at[0] if at else None
    heavy = max(kernels, key=lambda k: k.bytes_weights, default=None)
    biggest = (max(heavy.weights, key=lambda w: _size(infos[w]) if infos and w in infos else 0)
               if heavy is not None and heavy.weights else None)
    weights = f"{plan.weights_bytes} B of weights" + (
        f" (the most one kernel reads: {heavy.bytes_weights} B, chiefly {biggest!r}, in {heavy.op_type} kernel "
        f"{heavy.node_names[0]!r})" if biggest is not None else "")
    verdict = (f"tensor {single.name!r} alone ({single.size} B) is over the {limit} B limit"
               if single is not None and single.size > limit else
               f"together with {weights} they exceed the {limit} B limit")
    return f"at the {where}, {live[step]} B of activations are alive (the largest {named}); {verdict}"
