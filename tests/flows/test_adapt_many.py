"""flows/adapt_many.py: three zoo models adapted to one modeled target with one summary table, and
the same plans whichever Prefect task runner maps adapt over the models."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from subprocess_env import flow_env
from tasks.many_tasks import markdown_table, plan_signature

ROOT = Path(__file__).resolve().parents[2]

MODELS = ["mlp", "resnet_tiny", "vit_tiny"]
# budgets no run reaches: a search cut short by the clock keeps what fitted, which differs between
# runners sharing two cores (the plans must differ only by the runner)
QUICK = ["target=fpga", "search=quick", "profile.reps=3", "profile.warmup=0", "profile.batch_gradient=[1]",
         "verify.runs=3", "verify.warmup=1", "predictor.iterations=50", "search.time_budget_s=300",
         "budget.total_s=3000"]


def _run(tmp_path: Path, name: str, *extra: str, prefect_api: str | None = None) -> list[dict]:
    res = subprocess.run([sys.executable, str(ROOT / "flows" / "adapt_many.py"), *QUICK,
                          f"models=[{','.join(MODELS)}]", f"paths.artifacts={tmp_path / name}", *extra],
                         cwd=ROOT, env=flow_env(prefect_api), capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = Path(res.stdout.strip().splitlines()[-1].removeprefix("summary: "))
    assert summary.is_file() and "| model | decision |" in res.stdout and "modeled" in summary.read_text()
    rows = json.loads(summary.with_suffix(".json").read_text())
    assert [r["model"] for r in rows] == MODELS
    return rows


@pytest.fixture(scope="module")
def sequential(tmp_path_factory, migrated, prefect_api):
    """The reference: one model after the other (one thread), against the worker's Prefect server."""
    tmp = tmp_path_factory.mktemp("many")
    migrated(tmp / "sequential")          # the Dask run below starts in an empty folder, as a first run does
    rows = _run(tmp, "sequential", "task_runner.max_workers=1", prefect_api=prefect_api)
    assert all(r["decision"] in ("adapted", "rolled_back", "skipped") for r in rows)
    return [plan_signature(r["plan"]) for r in rows]


# The process runner goes through the same mapping (task_runner.kind=process); one parallel runner
# here keeps the suite's time down.
@pytest.mark.slow
def test_dask_runner_gives_the_sequential_plans(sequential, tmp_path):
    dask = _run(tmp_path, "dask", "task_runner.kind=dask", "task_runner.max_workers=2")
    assert [plan_signature(r["plan"]) for r in dask] == sequential


def test_no_models_is_a_clear_error(run_flow, tmp_path):
    res = run_flow("adapt_many", "target=fpga", f"paths.artifacts={tmp_path}")
    assert res.returncode == 2 and "models=[name,...]" in res.stderr and not list(tmp_path.glob("many/*"))


def test_unknown_task_runner_is_a_clear_error(run_flow, tmp_path):
    res = run_flow("adapt_many", "target=fpga", "models=[mlp]", "task_runner.kind=ray", f"paths.artifacts={tmp_path}")
    assert res.returncode == 2 and "task_runner.kind" in res.stderr


def test_the_table_ends_with_the_warnings_no_stage_logged():
    row = {"model": "mlp", "decision": "adapted", "actions": "int8", "default_ms": 1.0, "chosen_ms": 0.5, "speedup": 2.0,
           "accuracy_loss": 1e-4, "plan": "p", "warnings": ["predictor: off by more than 2x on 1 of 3 plans"]}
    table = markdown_table([row, dict(row, model="vit_tiny", warnings=[])], "fpga", "modeled")
    assert table.rstrip().splitlines()[-1] == "WARNING: mlp: predictor: off by more than 2x on 1 of 3 plans"
    assert "vit_tiny:" not in table.split("| vit_tiny |")[1]
