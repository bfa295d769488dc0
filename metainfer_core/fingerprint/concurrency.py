"""Onboarding's concurrency item: how a target serves several instances of one representative
model at once. Each instance (its own compiled model) runs back to back for a fixed time in a
thread of its own; 1, 2, 4, ... instances up to the cores this process may use (a modeled
device runs one kernel at a time, so its instances share it). Reported per count: throughput,
latency median and p90, scaling efficiency (throughput over n times one instance's) and the
power draw where the OS exposes a reader. It fails when adding instances loses throughput
beyond noise: a runtime that oversubscribes the cores collapses there."""
from __future__ import annotations

import glob
import os
import threading
import time
from dataclasses import dataclass

import numpy as np
import onnx

from metainfer_core.backends import Backend
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.serving.options import doublings, usable_cores

DURATION_S = 0.5        # each count runs this long (throughput needs whole seconds of nothing; this is a check)
KEEP = 0.8              # more instances must keep this share of the best throughput with fewer
MODELED_COUNTS = (1, 2, 4)
RAPL = "/sys/class/powercap/*/energy_uj"    # Linux powercap (RAPL) package energy counters, microjoules


def instance_counts(backend: Backend) -> tuple[int, ...]:
    """1, 2, 4, ... up to the usable cores (the cores count itself last); fixed on a modeled device."""
    if backend.info.measurement == "modeled":
        return MODELED_COUNTS
    return tuple(doublings(usable_cores()))


@dataclass
class Energy:
    """Package energy read from the powercap counters (None: no reader here)."""
    files: list[str]

    @classmethod
    def reader(cls) -> "Energy | None":
        files = [f for f in sorted(glob.glob(RAPL)) if os.access(f, os.R_OK)]
        return cls(files) if files else None

    def joules(self) -> float:
        return sum(int(open(f).read()) for f in self.files) / 1e6


def measure(backend: Backend, model: onnx.ModelProto, n: int, duration_s: float = DURATION_S) -> dict:
    """`n` instances of `model` served at once for `duration_s`."""
    feeds = random_feeds(model)
    compiled = [backend.compile(model) for _ in range(n)]
    for c in compiled:
        c.time_once(feeds)      # warm
    energy = Energy.reader()
    if backend.info.measurement == "modeled":
        # one device, one kernel at a time: the instances take turns
        one = [compiled[0].time_once(feeds) for _ in range(20)]
        lat = [ms * n for ms in one]
        per_s = 1e3 / float(np.median(one))
        return _row(n, per_s, lat, None)
    lat: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(n + 1)

    def work(c) -> None:
        mine = []
        start.wait()
        end = time.perf_counter() + duration_s
        while time.perf_counter() < end:
            mine.append(c.time_once(feeds))
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=work, args=(c,)) for c in compiled]
    for t in threads:
        t.start()
    joules0 = energy.joules() if energy else None
    t0 = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    wall_s = time.perf_counter() - t0
    watts = (energy.joules() - joules0) / wall_s if energy else None
    return _row(n, len(lat) / wall_s, lat, watts)


def _row(n: int, per_s: float, lat: list[float], watts: float | None) -> dict:
    return {"instances": n, "throughput_per_s": per_s, "median_latency_ms": float(np.median(lat)),
            "p90_latency_ms": float(np.percentile(lat, 90)), "watts": watts}


def verdict(rows: list[dict]) -> tuple[bool, str]:
    """(passed, detail): each count's efficiency against one instance; failed where a count keeps
    less than KEEP of the best throughput with fewer instances."""
    one = rows[0]["throughput_per_s"]
    parts, failed, best = [], [], 0.0
    for r in rows:
        r["scaling_efficiency"] = r["throughput_per_s"] / (r["instances"] * one) if one > 0 else 0.0
        if best and r["throughput_per_s"] < KEEP * best:
            failed.append(f"{r['instances']} instances serve {r['throughput_per_s']:.0f}/s, below {KEEP:.0%} of "
                          f"the {best:.0f}/s fewer instances served")
        best = max(best, r["throughput_per_s"])
        parts.append(f"{r['instances']}x: {r['throughput_per_s']:.0f}/s (efficiency {r['scaling_efficiency']:.2f}), "
                     f"median {r['median_latency_ms']:.3g} ms, p90 {r['p90_latency_ms']:.3g} ms")
    watts = [r["watts"] for r in rows if r["watts"] is not None]
    power = (f"power {', '.join(f'{w:.1f} W' for w in watts)}" if watts else
             "power draw not measurable here (no readable powercap/RAPL counters, no NVML)")
    detail = "; ".join(parts) + f"; {power}"
    return not failed, (detail + ("; FAILED: " + "; ".join(failed) + ": the runtime loses throughput under "
                                  "concurrency (threads per instance over the cores?)" if failed else ""))
