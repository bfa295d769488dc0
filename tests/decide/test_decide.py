"""Rollback decisions from verified (interleaved) measurements."""
from __future__ import annotations

import numpy as np
import pytest

from metainfer_core.decide.stage import decide
from metainfer_core.search.score import Weights
from metainfer_core.verify import Verified


def v(label, ms, loss=0.0, mem=100, error=None, jitter=0.02, seed=0, n=20):
    samples = list(ms * np.random.default_rng(seed).lognormal(0, jitter, n)) if error is None else []
    return Verified(label, latency_ms=float(np.median(samples)) if samples else float("nan"),
                    p90_ms=float(np.percentile(samples, 90)) if samples else float("nan"),
                    peak_mem_bytes=mem, accuracy_loss=loss, error=error, samples_ms=samples)


def test_faster_candidate_is_adapted():
    d = decide(v("default", 10.0), [v("a", 9.0, seed=1), v("b", 7.0, seed=2)], max_loss=0.01, memory_limit=1000)
    assert d.decision == "adapted" and d.chosen == 1


def test_slower_candidate_rolls_back():
    d = decide(v("default", 10.0), [v("a", 10.5, seed=1)], max_loss=0.01, memory_limit=1000)
    assert d.decision == "rolled_back" and d.chosen is None and "not faster" in d.reason


def test_gain_within_noise_rolls_back():
    d = decide(v("default", 10.0, jitter=0.3), [v("a", 9.7, jitter=0.3, seed=1)], max_loss=0.01, memory_limit=1000)
    assert d.decision == "rolled_back" and "beyond noise" in d.reason


def test_small_gain_with_low_noise_is_kept():
    d = decide(v("default", 10.0, jitter=0.005), [v("a", 9.5, jitter=0.005, seed=1)], max_loss=0.01, memory_limit=1000)
    assert d.decision == "adapted"


def test_accuracy_memory_and_failures_reject():
    cands = [v("lossy", 5.0, loss=0.2), v("big", 5.0, mem=5000), v("broken", 5.0, error="boom")]
    d = decide(v("default", 10.0), cands, max_loss=0.01, memory_limit=1000)
    assert d.decision == "rolled_back"
    assert "accuracy" in d.reason and "limit" in d.reason and "failed to run" in d.reason


EMBEDDED = Weights(latency=1.0, memory=1.0, accuracy=1.0, change_penalty=0.02)
LATENCY = Weights(latency=1.0, memory=0.0, accuracy=0.1, change_penalty=0.02)


def test_memory_saving_plan_pays_when_memory_counts():
    base, lean = v("default", 10.0, mem=1000), v("lean", 10.0, mem=600, seed=1)
    kept = decide(base, [lean], max_loss=0.01, memory_limit=10**6, objective=EMBEDDED, changes=[1])
    assert kept.decision == "adapted" and "less peak memory" in kept.reason
    # latency-only weights: the same plan does not pay
    assert decide(base, [lean], 0.01, 10**6, objective=LATENCY, changes=[1]).decision == "rolled_back"
    # nor does a lean plan that is slower beyond noise
    slow = v("slow", 11.0, mem=600, seed=1)
    assert decide(base, [slow], 0.01, 10**6, objective=EMBEDDED, changes=[1]).decision == "rolled_back"


def test_choice_follows_the_measured_score_not_the_fastest():
    base = v("default", 10.0, mem=1000)
    fast_fat, lean = v("fast_fat", 8.0, mem=1000, seed=1), v("lean", 8.5, mem=300, seed=2)
    d = decide(base, [fast_fat, lean], 0.01, 10**6, objective=EMBEDDED, changes=[1, 1])
    assert d.chosen == 1                                  # 0.85 + 0.3 beats 0.8 + 1.0
    assert decide(base, [fast_fat, lean], 0.01, 10**6).chosen == 0     # no weights: the fastest


def test_a_plan_that_fits_beats_a_default_that_does_not():
    d = decide(v("default", 10.0, mem=5000), [v("tiled", 12.0, mem=800, seed=1)], 0.01, memory_limit=1000,
               objective=LATENCY, changes=[2])
    assert d.decision == "adapted" and "does not fit" in d.reason


def test_when_the_default_does_not_fit_memory_counts_against_the_device_limit():
    """Relative to a default 7x over the limit, a 19 % saving between two fitting plans would weigh
    0.013, less than the slower plan's extra latency; against the limit it weighs 0.15."""
    base = v("default", 15.0, mem=700_000)
    fast, lean = v("fast", 2.3, mem=81_000, seed=1), v("lean", 3.7, mem=66_000, seed=2)
    d = decide(base, [fast, lean], 0.01, 98_304, objective=Weights(0.6, 1.0, 1.0, 0.02), changes=[2, 3])
    assert d.chosen == 1 and "score 0.87" in d.verdicts["lean"]       # 0.6*3.7/15 + 66000/98304 + 3*0.02


def test_change_penalty_can_outweigh_a_tiny_gain():
    d = decide(v("default", 10.0, jitter=0.002), [v("busy", 9.6, jitter=0.002, seed=1)], 0.01, 10**6,
               objective=Weights(1.0, 0.0, 0.0, change_penalty=0.05), changes=[1])
    assert d.decision == "rolled_back" and "scores" in d.reason


def test_fewer_actions_win_when_the_gain_is_within_noise():
    """int8 + bf16 measured 2 % faster than bf16 alone in noisy rounds: not a gain to pay an
    action for; with low noise the same 5 % gain is kept."""
    base = v("default", 10.0, jitter=0.05)
    plain, stacked = v("bf16", 5.2, loss=0.0064, jitter=0.05, seed=1), v("int8+bf16", 5.1, loss=0.0066, jitter=0.05, seed=2)
    d = decide(base, [stacked, plain], 0.01, 10**6, objective=LATENCY, changes=[2, 1])
    assert d.chosen == 1 and "not faster beyond noise" in d.reason
    base = v("default", 10.0, jitter=0.002)
    plain, stacked = v("bf16", 5.4, loss=0.0064, jitter=0.002, seed=1), v("int8+bf16", 5.1, loss=0.0066, jitter=0.002, seed=2)
    assert decide(base, [stacked, plain], 0.01, 10**6, objective=LATENCY, changes=[2, 1]).chosen == 0
    # a simpler plan with more loss is not preferred
    plain = v("bf16", 5.2, loss=0.009, jitter=0.05, seed=1)
    assert decide(v("default", 10.0, jitter=0.05), [v("int8+bf16", 5.1, loss=0.0066, jitter=0.05, seed=2), plain],
                  0.01, 10**6, objective=LATENCY, changes=[2, 1]).chosen == 0


MiB, HOST = 2**20, 8 * 2**30
BALANCED = Weights(latency=1.0, memory=0.3, accuracy=1.0, change_penalty=0.02, memory_floor=0.25)


def test_a_runtimes_tens_of_mib_on_a_host_do_not_outweigh_a_faster_plan():
    """Relative to the default's 22 MiB, OpenVINO's 60 MiB would cost 0.3 x 1.7 = 0.5 and throw
    away a 1.7x plan; priced against a quarter of an 8 GiB host, it costs 0.01."""
    base = v("default", 10.0, mem=int(22.3 * MiB))
    fat_fast, lean = v("openvino", 5.8, mem=int(59.9 * MiB), seed=1), v("int8", 8.0, mem=int(21 * MiB), seed=2)
    d = decide(base, [fat_fast, lean], 0.01, HOST, objective=BALANCED, changes=[1, 1])
    assert d.chosen == 0
    assert "latency +0.2" in d.verdicts["int8"]                      # says where the slower plan lost
    # charged relative to the default (the former pricing, memory_floor 0) the faster plan scores worse
    # than the default itself, and the decision says what its memory is on this host
    d = decide(base, [fat_fast, lean], 0.01, HOST, objective=Weights(1.0, 0.3, 1.0, 0.02), changes=[1, 1])
    assert d.chosen == 1 and "+37.6 MiB (+0.46% of 8 GiB)" in d.verdicts["openvino"]


def test_embedded_weights_still_buy_the_smaller_plan_on_a_host():
    base = v("default", 10.0, mem=int(40 * MiB))
    lean = v("lean", 10.0, mem=int(30 * MiB), seed=1)
    embedded = Weights(0.6, 1.0, 1.0, 0.02, memory_floor=0.0)
    assert decide(base, [lean], 0.01, HOST, objective=embedded, changes=[1]).decision == "adapted"
    assert decide(base, [lean], 0.01, HOST, objective=BALANCED, changes=[1]).decision == "rolled_back"


def test_on_a_device_the_model_fills_memory_counts_relative_to_the_default():
    """An 8 MB budget (the asic's SRAM) a 6 MB default fills: the floor (2 MB) is below the
    default, so the score is today's, and the leaner plan wins as before."""
    base = v("default", 10.0, mem=6_000_000)
    fast_fat, lean = v("fast_fat", 8.0, mem=6_000_000, seed=1), v("lean", 8.5, mem=1_800_000, seed=2)
    d = decide(base, [fast_fat, lean], 0.01, 2**29, objective=BALANCED, changes=[1, 1], memory_budget=8 * 2**20)
    assert d.chosen == 1


def test_memory_base_prices_memory_by_the_target():
    from metainfer_core.search.score import memory_base
    assert memory_base(22 * MiB, HOST, HOST, 0.25) == 2 * 2**30          # a sliver of a host
    assert memory_base(22 * MiB, HOST, HOST, 0.0) == 22 * MiB            # every byte relative to the default
    assert memory_base(6_000_000, 2**29, 8 * 2**20, 0.25) == 6_000_000   # a device the model fills
    assert memory_base(700_000, 98_304, 98_304, 0.25) == 98_304          # the default does not fit


def test_the_throughput_weight_counts_only_under_load_estimated_from_latency_one_request_at_a_time():
    from metainfer_core.settings import WeightSettings

    w = WeightSettings(name="balanced", latency=1.0, memory=0.3, accuracy=1.0, change_penalty=0.02, throughput=2.0)
    alone, loaded = Weights.of(w), Weights.of(w, under_load=True)
    assert alone.throughput == 0 and "throughput" not in alone.terms(0.8, 0.0, 0.0, 0)
    assert loaded.terms(0.8, 0.0, 0.0, 0)["throughput"] == pytest.approx(1.6)          # estimated: 1 / (1 / 0.8)
    assert loaded.terms(0.8, 0.0, 0.0, 0, throughput_ratio=1.1)["throughput"] == pytest.approx(2.2)
    # a plan 0.9x the default's latency alone: under load its gain weighs three times
    assert loaded.score(1.0, 0, 0, 0) - loaded.score(0.9, 0, 0, 0) == pytest.approx(3 * 0.1)


def test_paired_rounds_that_disagree_with_the_medians_do_not_adapt():
    # drift: the default ran slow in the last 9 rounds; paired ratios say 0.9 in 17 of 20 rounds, yet the
    # candidate's median (1.2) is above the default's (1.0), so plan.md would report a slower "adapted" plan
    base_ms = [1.0] * 11 + [2.0] * 9
    cand_ms = [1.2] * 3 + [0.9] * 8 + [1.8] * 9
    base = Verified("default", latency_ms=float(np.median(base_ms)), peak_mem_bytes=100, samples_ms=base_ms)
    cand = Verified("a", latency_ms=float(np.median(cand_ms)), peak_mem_bytes=100, samples_ms=cand_ms)
    d = decide(base, [cand], max_loss=0.01, memory_limit=1000)
    assert d.decision == "rolled_back" and "not faster" in d.reason
