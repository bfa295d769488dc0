"""Requests in flight combined into one call (dynamic batching, as Triton's dynamic batcher does):
where every input of the plan takes its rows along a symbolic first dim within the shape range,
a serving setting may carry `batch`, the most rows one call takes. Requests waiting for a
session are stacked along that dim, run in one call, and each gets its own rows of every output.
Where more requests are in flight than the cores serve at once, one call of several rows costs
less than as many calls of one (per-call overhead, weights read once); where they are not, it
can cost more, so it is a setting measured under the load like the others, not a rule.

A model whose outputs mix rows across the first dim (a batch statistic, a first dim that is not
the batch) would answer a request with another's data: a batched setting is opened only after
one batched call's rows match the same requests run one by one (BATCH_RTOL)."""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable

import numpy as np
import onnx

from metainfer_core.errors import MetaInferError

Feeds = dict[str, np.ndarray]
BATCH_RTOL = 1e-3       # a batched call's rows against one-by-one runs: kernels may sum in another order
WAIT_SHARE = 0.1        # a call short of its rows waits for more up to this share of the last call's time...
WAIT_MAX_S = 0.002      # ...and never longer than this


def batch_rows(model: onnx.ModelProto, ranges: dict, tuned: dict[str, list[int]]) -> int:
    """The most rows one call may take, where requests are one row each: every graph input has
    a symbolic first dim that the shape range lets vary (`ranges`: input -> its dims' DimRange)
    and the tuned shape has at 1 (`tuned`: input -> its tuned shape; a request of several rows,
    a sentence's windows, is not a batch of requests); the least range maximum over the inputs.
    1 where any input lacks one."""
    inits = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    most = []
    for i in inputs:
        dims = i.type.tensor_type.shape.dim
        first = (ranges.get(i.name) or [None])[0]
        if not dims or dims[0].HasField("dim_value") or first is None or first.fixed:
            return 1
        if (tuned.get(i.name) or [1])[0] != 1:
            return 1
        most.append(first.high)
    return max(1, min(most, default=1))


class NotBatchable(MetaInferError):
    pass


def _rows(feeds: Feeds) -> int | None:
    """The requests' rows (its first dim, the same on every input), None where they differ or an input has none."""
    sizes = {np.shape(v)[0] if np.ndim(v) else None for v in feeds.values()}
    return sizes.pop() if len(sizes) == 1 and None not in sizes else None


def _signature(feeds: Feeds) -> tuple:
    return tuple((k, np.shape(v)[1:], np.asarray(v).dtype.str) for k, v in sorted(feeds.items()))


def _split(outputs: list[np.ndarray], sizes: list[int]) -> list[list[np.ndarray]] | None:
    """Each request's rows of every output; None where an output's first dim is not the rows' sum."""
    total = sum(sizes)
    if any(np.ndim(o) == 0 or np.shape(o)[0] != total for o in outputs):
        return None
    cuts = np.cumsum(sizes)[:-1]
    per = [np.split(np.asarray(o), cuts) for o in outputs]
    return [[p[i] for p in per] for i in range(len(sizes))]


class _Request:
    __slots__ = ("feeds", "rows", "key", "done", "result", "error")

    def __init__(self, feeds: Feeds):
        self.feeds, self.rows, self.key = feeds, _rows(feeds), _signature(feeds)
        self.done, self.result, self.error = threading.Event(), None, None


class BatchingPool:
    """Serves run(feeds) from many threads: `dispatchers` threads, one per slot of `run_slots`
    (the compiled sessions or infer requests), each taking the oldest waiting request and the
    others of its shapes still waiting (up to `rows` rows), running them as one call and handing
    each its rows. A request that cannot be combined (no common first dim, more rows than
    `rows`, outputs that do not carry the rows) runs alone."""

    def __init__(self, run_slots: list[Callable[[Feeds], list[np.ndarray]]], rows: int, setting: dict,
                 compile_s: float = 0.0):
        self.size, self.setting, self.compile_s, self.rows = len(run_slots), dict(setting), compile_s, rows
        self._waiting: deque[_Request] = deque()
        self._cond = threading.Condition()
        self._turn = threading.Lock()
        self._last_s = 0.0
        for slot in run_slots:
            threading.Thread(target=self._dispatch, args=(slot,), daemon=True).start()

    def run(self, feeds: Feeds) -> list[np.ndarray]:
        r = _Request(feeds)
        with self._cond:
            self._waiting.append(r)
            self._cond.notify_all()
        r.done.wait()
        if r.error is not None:
            raise r.error
        return r.result

    __call__ = run

    def _take(self) -> list[_Request]:
        """The oldest request and those of its shapes waiting now or within the wait (up to `rows`
        rows). One dispatcher takes at a time: an idle one does not snatch the request another
        is waiting for to fill its call."""
        with self._turn, self._cond:
            while not self._waiting:
                self._cond.wait()
            first = self._waiting.popleft()
            taken = [first]
            if first.rows is None or first.rows >= self.rows:
                return taken
            deadline = time.perf_counter() + min(WAIT_SHARE * self._last_s, WAIT_MAX_S)
            while True:
                room = self.rows - sum(r.rows for r in taken)
                for r in [r for r in self._waiting if r.key == first.key and r.rows is not None]:
                    if r.rows <= room:
                        self._waiting.remove(r)
                        taken.append(r)
                        room -= r.rows
                left = deadline - time.perf_counter()
                if room <= 0 or left <= 0:
                    return taken
                self._cond.wait(left)

    def _dispatch(self, slot: Callable[[Feeds], list[np.ndarray]]) -> None:
        while True:
            taken = self._take()
            t0 = time.perf_counter()
            try:
                if len(taken) == 1:
                    taken[0].result = slot(taken[0].feeds)
                else:
                    stacked = {k: np.concatenate([r.feeds[k] for r in taken]) for k in taken[0].feeds}
                    parts = _split(slot(stacked), [r.rows for r in taken])
                    for i, r in enumerate(taken):
                        r.result = parts[i] if parts is not None else slot(r.feeds)
            except Exception as exc:  # noqa: BLE001 - each request raises it in its own thread
                for r in taken:
                    r.error = exc
            self._last_s = time.perf_counter() - t0
            for r in taken:
                r.done.set()


def check_rows(run: Callable[[Feeds], list[np.ndarray]], feeds: Feeds, rows: int) -> None:
    """One call of `rows` requests (`feeds` and copies of it nudged apart: float inputs scaled)
    against the same requests run one by one: each request's rows of every output within
    BATCH_RTOL of its own run's (relative to the output's scale), else NotBatchable."""
    own = _rows(feeds)
    if own is None:
        raise NotBatchable("the inputs have no common first dim to combine requests along")
    n = rows // max(1, own)
    if n < 2:
        raise NotBatchable(f"a request has {own} rows: a call of at most {rows} rows cannot take two of them")
    requests = [{k: (v * (1 - 0.05 * i)).astype(v.dtype) if np.issubdtype(np.asarray(v).dtype, np.floating) else v
                 for k, v in feeds.items()} for i in range(n)]
    stacked = {k: np.concatenate([r[k] for r in requests]) for k in feeds}
    parts = _split(run(stacked), [_rows(r) for r in requests])
    if parts is None:
        raise NotBatchable("an output does not carry the requests' rows along its first dim")
    for i, r in enumerate(requests):
        for got, want in zip(parts[i], run(r)):
            want, got = np.asarray(want), np.asarray(got)
            if want.shape != got.shape or not _close(got, want):
                raise NotBatchable("a request's outputs in a batched call differ from its outputs alone: the "
                                   "model mixes rows across its first dim")


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    if not np.issubdtype(want.dtype, np.number) or want.size == 0:
        return bool(np.array_equal(got, want))
    scale = float(np.max(np.abs(want.astype(np.float64))))
    return bool(np.allclose(got, want, rtol=0, atol=BATCH_RTOL * max(scale, 1e-6)))
