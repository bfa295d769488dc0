"""The serving settings a runtime offers for a load, as the runtime declares them
(Runtime.serving_options): each is a dict of the runtime's own spec keys plus `sessions` (how
many compiled copies share the requests) and, where the requests can be combined, `batch` (the
most rows one call takes, serving/batching.py). They grow with the cores and the concurrency: a
16-core target at 8 requests is offered 1, 2, 4 and 8 sessions of 16, 8, 4 and 2 threads."""
from __future__ import annotations

import math
import os
from typing import Any

Setting = dict[str, Any]


def usable_cores() -> int:
    """The cores this process may run on (its affinity), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:      # not Linux
        return os.cpu_count() or 1


def doublings(limit: int) -> list[int]:
    """1, 2, 4, ... up to `limit`, `limit` itself last."""
    out, n = [], 1
    while n < limit:
        out.append(n)
        n *= 2
    return out + [max(1, limit)]


def batched(setting: Setting, concurrency: int, rows: int, parallel: int) -> list[Setting]:
    """`setting` with its requests combined into calls of up to `rows` rows (serving/batching.py)
    where `parallel` calls at once leave it two or more requests each: [] otherwise."""
    per = math.ceil(concurrency / max(1, parallel))
    return [{**setting, "batch": min(rows, per)}] if rows >= 2 and per >= 2 else []


def split_setting(setting: Setting) -> tuple[int, Setting]:
    """(sessions, the rest: spec keys of the runtime), without the pool's own `batch`."""
    rest = dict(setting)
    rest.pop("batch", None)
    return int(rest.pop("sessions", 1)), rest


def batch_of(setting: Setting) -> int:
    """The most rows one call takes (1: each request its own call)."""
    return max(1, int(setting.get("batch") or 1))


THREADS_ONLY = {"sessions", "intra_op_threads"}


def threads_only(setting: Setting) -> bool:
    """Sessions of some intra-op threads, nothing the runtime picks itself (streams, a hint) and
    no requests combined: what the thread scaling the fingerprint measures predicts
    (serving/predicted.py)."""
    return set(setting) <= THREADS_ONLY and "intra_op_threads" in setting


def describe(setting: Setting) -> str:
    """'2 sessions x 1 thread', 'THROUGHPUT hint, 2 streams, 2 threads'."""
    sessions, rest = split_setting(setting)
    threads = rest.get("intra_op_threads")
    parts = []
    if rest.get("performance_hint"):
        parts.append(f"{rest['performance_hint']} hint")
        streams = rest.get("num_streams")
        parts.append(f"{streams} stream{'s' if streams != 1 else ''}" if streams else "the plugin's streams")
    if sessions != 1 or not parts:
        parts.insert(0, f"{sessions} session{'s' if sessions != 1 else ''}")
    if threads is not None:
        parts.append(f"{threads} thread{'s' if threads != 1 else ''}" + (" each" if sessions > 1 else ""))
    if batch_of(setting) > 1:
        parts.append(f"batches of up to {batch_of(setting)}")
    return ", ".join(parts)
