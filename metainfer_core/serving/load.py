"""Closed-loop load: `concurrency` clients, each sending its next request as soon as the last one
is answered, for a fixed time; requests per second and latency percentiles over every request
answered in that time (the way benchmark_app and Triton's perf_analyzer report a load)."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

Feeds = dict[str, np.ndarray]
WARM_S = 0.2            # each load is served this long first, unmeasured (first runs, thread pools spinning up)
HUNG_S = 60.0           # a request still running this long after the load's end: the runtime hung


@dataclass
class LoadFigures:
    """Requests answered, the seconds they took, and each one's latency (ms)."""
    latencies_ms: list[float] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None

    @property
    def requests(self) -> int:
        return len(self.latencies_ms)

    @property
    def throughput_per_s(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms else float("nan")

    def merged(self, other: "LoadFigures") -> "LoadFigures":
        return LoadFigures(self.latencies_ms + other.latencies_ms, self.seconds + other.seconds,
                           self.error or other.error)

    def as_dict(self, q: float) -> dict:
        return {"throughput_per_s": self.throughput_per_s, "requests": self.requests, "seconds": self.seconds,
                "p50_ms": self.percentile(50), "p90_ms": self.percentile(90), f"p{q:g}_ms": self.percentile(q),
                "error": self.error}


def under_load(run: Callable[[Feeds], object], feeds: Feeds, concurrency: int, duration_s: float,
               warm_s: float = WARM_S) -> LoadFigures:
    """`run` (thread-safe: a serving Pool's) driven by `concurrency` closed-loop clients for
    `duration_s` after `warm_s` unmeasured; an exception in a client ends the load and is kept."""
    if warm_s > 0:
        _drive(run, feeds, concurrency, warm_s)
    return _drive(run, feeds, concurrency, duration_s)


def _drive(run, feeds: Feeds, concurrency: int, duration_s: float) -> LoadFigures:
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    errors: list[str] = []
    start = threading.Barrier(concurrency + 1)
    stop = [0.0]

    def client(mine: list[float]) -> None:
        start.wait()
        end = stop[0]
        try:
            while True:
                t0 = time.perf_counter()
                if t0 >= end or errors:
                    return
                run(feeds)
                mine.append((time.perf_counter() - t0) * 1e3)
        except Exception as exc:  # noqa: BLE001 - reported as the load's error
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=client, args=(latencies[i],), daemon=True) for i in range(concurrency)]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    stop[0] = t0 + duration_s
    start.wait()
    for t in threads:       # a request that never returns (a runtime's deadlock) ends the load, not the run
        t.join(max(stop[0] + HUNG_S - time.perf_counter(), 0.0))
    if any(t.is_alive() for t in threads):
        errors.append(f"a request did not return within {HUNG_S:g} s after the load's end (the runtime hung)")
    # the last requests started before the end finish after it: the window is until the last answer
    return LoadFigures([x for mine in list(latencies) for x in list(mine)], time.perf_counter() - t0,
                       errors[0] if errors else None)
