"""How many interleaved rounds verify times: verify.runs, fewer where the verify share is short,
more (up to verify.max_runs) where half of it has room."""
from __future__ import annotations

from metainfer_core.search.candidate import Candidate
from metainfer_core.verify.measure import MIN_ROUNDS
from metainfer_core.verify.stage import EXTRA_ROUNDS_SHARE, verify_runs
from metainfer_core.zoo import build


def _plans(ms: float, n: int) -> list[Candidate]:
    m = build("mlp")
    return [Candidate(m, latency_ms=ms) for _ in range(n)]


def test_a_fast_model_gets_more_rounds_within_half_the_share(settings_for):
    s = settings_for()
    default, *plans = _plans(2.0, 6)
    runs, expected = verify_runs(s, plans, default, 8, allowance_s=30.0)
    assert runs == s.verify.max_runs > s.verify.runs
    assert expected <= EXTRA_ROUNDS_SHARE * 30.0


def test_rounds_past_verify_runs_stop_at_half_the_share(settings_for):
    s = settings_for()
    default, *plans = _plans(25.0, 6)
    runs, expected = verify_runs(s, plans, default, 8, allowance_s=30.0)
    assert s.verify.runs < runs < s.verify.max_runs
    assert expected <= EXTRA_ROUNDS_SHARE * 30.0 + 1e-9


def test_a_slow_model_keeps_verify_runs_or_fewer(settings_for):
    s = settings_for()
    default, *plans = _plans(180.0, 3)
    assert verify_runs(s, plans, default, 8, allowance_s=40.0)[0] == s.verify.runs
    assert MIN_ROUNDS <= verify_runs(s, plans, default, 8, allowance_s=20.0)[0] < s.verify.runs


def test_without_an_allowance_verify_runs_stands(settings_for):
    s = settings_for()
    default, *plans = _plans(2.0, 6)
    assert verify_runs(s, plans, default, 8, allowance_s=None)[0] == s.verify.runs
