"""Fakes the search's tests pass in instead of the wall clock: a budget's decisions are then
exact, and a step made slow "as on a large model" advances the clock instead of sleeping."""
from __future__ import annotations

import types
from typing import Callable


class FakeClock:
    """A search clock (metainfer_core/search/clock.py's Clock) that moves only when told."""

    def __init__(self, start: float = 0.0):
        self.t = start

    def now(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s

    def slowed(self, fn: Callable, s: float) -> Callable:
        """`fn` that takes `s` seconds on this clock first (a rewrite or measurement as slow as
        on a large model); for monkeypatch.setattr on a class or module."""
        def slow(*args, **kwargs):
            self.advance(s)
            return fn(*args, **kwargs)

        return slow

    def drive(self, monkeypatch, module: types.ModuleType) -> None:
        """`module`'s time.perf_counter reads this clock: seconds code outside search/ counts on
        the wall clock (accuracy/sensitivity.py's Sensitivity.seconds, which the budget's
        precision_s reads) then count what the test advanced, as the budget does."""
        monkeypatch.setattr(module, "time", types.SimpleNamespace(perf_counter=self.now))
