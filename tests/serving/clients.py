"""Concurrent clients of a serving pool, shared by the serving tests; holds no tests itself."""
from __future__ import annotations

import threading

import numpy as np

from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.backends.runtimes import runtime_of
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.serving.pool import pool_on
from metainfer_core.zoo import build

from twins import backend


def served_by_clients(runtime: str, setting: dict, in_flight: int, requests: int, clients: int = 4):
    """The zoo MLP opened as a pool on `runtime` with `setting` for `in_flight` requests, then
    `requests` feeds sent by `clients` threads at once: (pool, answers by request, each request's
    answer run alone)."""
    model = build("mlp", seed=0)
    host = backend("cpu")
    path = ExecutionPath(runtime, "f32")
    feeds = [random_feeds(model, seed=i) for i in range(requests)]
    want = [host.compile(model).run(f) for f in feeds]
    pool = pool_on(runtime_of(runtime), path, model, host.path_backend(path).spec, setting, in_flight, feeds[0])
    got: dict[int, list] = {}

    def client(i: int) -> None:
        for k in range(i, requests, clients):
            got[k] = pool.run(feeds[k])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return pool, got, want


def assert_same_answers(got: dict[int, list], want: list, rtol: float, atol: float) -> None:
    assert sorted(got) == list(range(len(want)))
    for k, w in enumerate(want):
        for a, b in zip(got[k], w):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
