"""The search's sense of time, passed in: the wall clock in a run, a fake one in tests (a
budget's decisions are then exact and a test never sleeps)."""
from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale (only differences mean anything)."""


class WallClock:
    def now(self) -> float:
        return time.perf_counter()


WALL = WallClock()
