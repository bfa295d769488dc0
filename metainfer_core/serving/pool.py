"""A plan compiled for serving: `sessions` compiled copies with the runtime settings of one
serving setting, and one slot per request in flight (serving/options.py), or per call of
combined requests (serving/batching.py). run() is safe to call
from many threads at once: each call takes a free slot, runs, and gives it back; a call finding
none free waits for one."""
from __future__ import annotations

import math
import queue
from typing import Any, Callable

import numpy as np
import onnx

from metainfer_core.serving.batching import BatchingPool, check_rows
from metainfer_core.serving.options import Setting, batch_of, split_setting

Feeds = dict[str, np.ndarray]


class Pool:
    def __init__(self, slots: list[Callable[[Feeds], list[np.ndarray]]], setting: Setting, compile_s: float = 0.0):
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        for s in slots:
            self._free.put(s)
        self.size, self.setting, self.compile_s = len(slots), dict(setting), compile_s

    def run(self, feeds: Feeds) -> list[np.ndarray]:
        slot = self._free.get()
        try:
            return slot(feeds)
        finally:
            self._free.put(slot)

    __call__ = run


def open_pool(compile_one: Callable[[dict[str, Any]], Any], setting: Setting, concurrency: int,
              feeds: Feeds, first=None) -> Pool | BatchingPool:
    """`compile_one(spec_overrides)` -> a Compiled (backends/base.py) with the setting's runtime
    keys over its own; called `sessions` times (less one where `first`, compiled with those
    keys, is given), and each copy gives its share of `concurrency` slots (at least one each).
    With the setting's `batch` (serving/batching.py) a slot serves that many requests' rows in
    one call: a copy gives its share divided by it, and the rows are checked against one-by-one
    runs on `feeds` first (NotBatchable; not checked with no feeds, as load_plan opens it)."""
    sessions, overrides = split_setting(setting)
    compiled = ([first] if first is not None else []) + \
        [compile_one(overrides) for _ in range(sessions - (first is not None))]
    batch = batch_of(setting)
    per = max(1, math.ceil(math.ceil(concurrency / sessions) / batch))
    slots = [s for c in compiled for s in c.slots(per, feeds)]
    compile_s = sum(getattr(c, "compile_s", 0.0) for c in compiled)
    if batch == 1:
        return Pool(slots, setting, compile_s)
    if feeds:
        check_rows(slots[0], feeds, batch)
    return BatchingPool(slots, batch, setting, compile_s)


def pool_on(runtime, path, model: onnx.ModelProto, spec: dict[str, Any], setting: Setting, concurrency: int,
            feeds: Feeds) -> Pool | BatchingPool:
    """`model` served on `path` by `runtime` (backends/runtimes/): `spec` the path's settings,
    the serving setting's keys over them."""
    return open_pool(lambda over: runtime.load(model, path, {**spec, **over}), setting, concurrency, feeds)
