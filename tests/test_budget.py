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


def test_a_budget_counts_from_when_the_command_started():
    """flows/adapt.py starts the clock before its imports and the stores' start-up (seconds on a
    first use): they come out of budget.total_s too; a start after now is no start."""
    b = Budget.of(100, SHARES, started=time.monotonic() - 30)
    assert b.left() == pytest.approx(70, abs=1) and b.allowance("normalize") == pytest.approx(7, abs=0.2)
    assert Budget.of(100, SHARES, started=time.monotonic() + 30).left() == pytest.approx(100, abs=1)
    assert BudgetSettings(total_s=100, shares=SHARES).start(time.monotonic() - 30).left() == pytest.approx(70, abs=1)


def test_elapsed_counts_wall_time():
    b = Budget.of(10, SHARES)
    time.sleep(0.05)
    assert 0.04 < b.elapsed() < 5 and b.left() < 10


@pytest.mark.slow
@pytest.mark.alone         # stages against wall-clock allowances; the second run must finish the profile
def test_adapt_within_a_small_budget_leaves_profiling_for_the_next_run(run_flow, migrated, tmp_path):
    """resnet_tiny's profile alone takes longer than a 4 s budget's share: the profile stops at
    its allowance, the search and verify fit in theirs, plan.json says what was spent, and the
    next run goes on measuring where the first stopped."""
    migrated(tmp_path)
    args = ("model=resnet_tiny", "budget.total_s=4", "profile.batch_gradient=[1,2,4]", f"paths.artifacts={tmp_path}")
    first = run_flow("adapt", *args)
    assert first.returncode == 0, first.stderr[-3000:]
    plan = first.plan
    budget = plan["budget"]
    assert budget["total_s"] == 4 and set(budget["spent_s"]) >= {"normalize", "profile", "train", "search", "verify"}
    assert plan["profile"]["left"] > 0, plan["profile"]
    # the start-up counts too, so each stage has about its minimum (1 s); the profile always
    # measures the graph's own kernels at the first batch (a few seconds on a loaded machine)
    assert budget["spent_s"]["profile"] <= budget["allowed_s"]["profile"] + 4.0
    assert budget["spent_s"]["search"] <= budget["allowed_s"]["search"] + 1.5
    # a stage past its share (verify's compiles and memory probes are not cut short) is said in plan.json
    for stage in budget["overruns"]:
        assert any(w.startswith(f"budget: {stage} took") for w in plan["warnings"]), (stage, plan["warnings"])
    assert "measurements left for the next run" in first.stderr
    # room to finish the set; the quick search: this run checks only the profile
    second = run_flow("adapt", *args[:1], "budget.total_s=60", *args[2:], "search=quick")
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.plan["profile"]["reused"] >= plan["profile"]["measured"]
    assert second.plan["profile"]["measured"] > 0 and second.plan["profile"]["left"] == 0   # the rest, now


def test_search_tries_paths_and_precisions_before_other_rewrites(settings_for):
    """With a time budget that ends early, the beam has already scored the execution paths and
    the low-precision plans the target offers: they come first in each state's expansions."""
    from metainfer_core.backends import backend_for
    from metainfer_core.actions import ACTIONS, expand
    from metainfer_core.normalize import normalize
    from metainfer_core.search.order import in_budget_order
    from metainfer_core.zoo import build

    s = settings_for("target=cpu")
    model = normalize(build("resnet_tiny"), None).model
    space = {name: dict(d) for name, d in s.action_space.actions.items()}
    todo = in_budget_order(expand(model, space, backend_for(s).info, narrow=False))
    order = [a for a, _, _ in todo]
    kinds = ["directive" if a.keeps_graph(a.with_defaults(p)) else "lossy" if a.lossy else "rewrite" for a, p, _ in todo]
    assert {"directive", "lossy", "rewrite"} <= set(kinds) and "binding" in {a.name for a in order}
    assert kinds == sorted(kinds, key=["directive", "lossy", "rewrite"].index)
    assert {a.name for a in order if a.lossy} >= {n for n in ("int8", "fp16") if n in space and ACTIONS[n].lossy}
    # the lossy actions take turns: every one's first choice before any one's second
    lossy = [a.name for a in order if a.lossy]
    firsts = list(dict.fromkeys(lossy))
    assert lossy[:len(firsts)] == firsts, lossy
