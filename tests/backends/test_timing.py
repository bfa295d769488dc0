"""timing.interleaved: the order of runs it makes (a recording fake of the Compiled interface,
the extension point it drives); that warm runs are what verify reports is a measured decision (docs/decisions/2026-12-05-measured-reasons-from-docstrings.md)."""
from __future__ import annotations

import pytest

from metainfer_core.backends.timing import SETTLE, SETTLE_BELOW_MS, interleaved, runs_per_sample, settle_runs
from app.compose import target_backend


class Recorder:
    def __init__(self, name: str, log: list[tuple[str, dict]]):
        self.name, self.log = name, log

    def time_once(self, feeds) -> float:
        self.log.append((self.name, feeds))
        return float(len(self.log))


def test_each_timed_run_follows_settle_runs_of_the_same_graph_and_rounds_rotate():
    log: list[tuple[str, dict]] = []
    a, b, c = (Recorder(n, log) for n in "abc")
    feeds = [{"x": 1}, {"x": 2}, {"x": 3}]
    samples = interleaved([a, None, c], feeds, rounds=3, settle=2)
    assert samples[1] == [] and len(samples[0]) == len(samples[2]) == 3
    names = [n for n, _ in log]
    assert names == ["a"] * 3 + ["c"] * 3 + ["c"] * 3 + ["a"] * 3 + ["a"] * 3 + ["c"] * 3
    assert all(f == {"x": 1} for n, f in log if n == "a") and all(f == {"x": 3} for n, f in log if n == "c")
    # the sample is the third run of each burst (the recorder returns the run's position)
    assert samples[0] == [3.0, 12.0, 15.0] and samples[2] == [6.0, 9.0, 18.0]


class Slow(Recorder):
    def time_once(self, feeds) -> float:
        super().time_once(feeds)
        return SETTLE_BELOW_MS * 2


def test_a_long_graph_settles_only_before_its_first_sample():
    log: list[tuple[str, dict]] = []
    fast, slow = Recorder("fast", log), Slow("slow", log)
    samples = interleaved([fast, slow], [{}, {}], rounds=3, settle=2)
    names = [n for n, _ in log]
    assert names.count("slow") == 3 + 2 and names.count("fast") == 3 * 3 and len(samples[1]) == 3
    assert runs_per_sample(SETTLE_BELOW_MS * 2) == 1 and runs_per_sample(1.0) == 1 + SETTLE


def _backend(name: str):
    return target_backend(name)


def test_only_measured_targets_settle():
    assert settle_runs(_backend("cpu")) == SETTLE
    assert settle_runs(_backend("gpu")) == 0


@pytest.mark.alone
def test_micro_benchmark_repetitions_scale_with_the_kernels_duration():
    from metainfer_core.backends import create_backend
    from metainfer_core.backends.timing import MIN_REPS, scaled_reps

    from graphs import matmul

    assert scaled_reps(30, 5, 0.01) == (30, 5)                 # a 10 us kernel keeps every run
    assert scaled_reps(30, 5, 200.0) == (MIN_REPS, 0)          # a 200 ms one needs no 30 (its first runs warmed it)
    cpu = create_backend("metainfer_core.backends.ort_backend.OrtBackend", "cpu", "measured",
                         {"intra_op_threads": 1, "memory_limit_bytes": 1 << 33})
    assert cpu.benchmark(matmul(16, 16, 16), reps=30, warmup=2).reps == 30
    assert cpu.benchmark(matmul(1024, 1024, 1024), reps=30, warmup=2).reps < 30     # ~10 ms a run here


@pytest.mark.alone
def test_a_deadline_ends_the_rounds_but_never_before_min_rounds():
    import time

    class Sleeper(Recorder):
        def time_once(self, feeds) -> float:
            time.sleep(0.005)
            return super().time_once(feeds)

    log: list[tuple[str, dict]] = []
    graphs = [Sleeper("a", log), Sleeper("b", log)]
    past = interleaved(graphs, [{}, {}], rounds=50, settle=0, deadline=time.perf_counter() - 1, min_rounds=3)
    assert [len(x) for x in past] == [3, 3]
    t0 = time.perf_counter()
    soon = interleaved(graphs, [{}, {}], rounds=50, settle=0, deadline=t0 + 0.1, min_rounds=3)
    assert 3 <= len(soon[0]) < 50 and time.perf_counter() - t0 < 0.1 + 0.3     # 50 rounds: 0.5 s; slack for a loaded CI
    assert [len(x) for x in interleaved(graphs, [{}, {}], rounds=4, settle=0)] == [4, 4]
