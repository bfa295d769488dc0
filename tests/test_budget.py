"""budget.total_s: one time budget shared by the stages of an adapt."""
from __future__ import annotations

import time

import pytest

from metainfer_core.budget import STAGES, Budget
from metainfer_core.errors import MetaInferError
from metainfer_core.settings import BudgetSettings

SHARES = {"normalize": 0.1, "profile": 0.3, "train": 0.1, "search": 0.3, "verify": 0.2}


def test_allowance_is_a_share_of_what_is_left():
    b = Budget.of(100, SHARES)
    assert b.allowance("normalize") == pytest.approx(10, abs=0.1)
    b.started -= 50                 # normalize took 50 s: the later stages share the 50 s left
    assert b.record("normalize", 50.0) is not None and "normalize took 50 s" in b.warnings[0]
    assert b.allowance("profile") == pytest.approx(50 * 0.3 / 0.9, abs=0.1)
    b.record("profile", 1.0)        # well within: no overrun, the rest goes on
    assert b.as_dict()["overruns"] == ["normalize"]
    assert b.allowance("profile") == b.as_dict()["allowed_s"]["profile"]   # fixed at its first call


def test_unknown_stage_and_bad_shares_are_refused(settings_for):
    with pytest.raises(ValueError, match="unknown stage"):
        Budget.of(10, {"searhc": 1.0})
    with pytest.raises(ValueError, match="not all 0"):
        BudgetSettings(total_s=10, shares={k: 0.0 for k in STAGES})
    with pytest.raises(MetaInferError, match="budget.total_s"):
        settings_for("budget.total_s=0")


def test_elapsed_counts_wall_time():
    b = Budget.of(10, SHARES)
    time.sleep(0.05)
    assert 0.04 < b.elapsed() < 5 and b.left() < 10


@pytest.mark.slow
def test_adapt_within_a_small_budget_leaves_profiling_for_the_next_run(run_flow, tmp_path):
    """resnet_tiny's profile alone takes longer than a 6 s budget's share: the profile stops at
    its allowance, the search and verify fit in theirs, plan.json says what was spent, and the
    next run goes on measuring where the first stopped."""
    args = ("model=resnet_tiny", "budget.total_s=6", "profile.batch_gradient=[1,2,4]", f"paths.artifacts={tmp_path}")
    first = run_flow("adapt", *args)
    assert first.returncode == 0, first.stderr[-3000:]
    plan = first.plan
    budget = plan["budget"]
    assert budget["total_s"] == 6 and set(budget["spent_s"]) >= {"normalize", "profile", "train", "search", "verify"}
    assert plan["profile"]["left"] > 0, plan["profile"]
    assert budget["spent_s"]["profile"] <= budget["allowed_s"]["profile"] + 1.0
    assert budget["spent_s"]["search"] <= budget["allowed_s"]["search"] + 1.5
    # normalize and training cannot be cut short; every bounded stage kept to its share
    assert plan["timings"]["total_s"] < 6 + plan["timings"]["normalize_s"] + plan["timings"]["train_s"] + 3
    assert "measurements left for the next run" in first.stderr
    second = run_flow("adapt", *args)
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.plan["profile"]["reused"] >= plan["profile"]["measured"]
    assert second.plan["profile"]["measured"] > 0        # it measured some of what the first run left
