"""Shared fixtures: settings composed from the real conf/ tree, isolated per test under
tmp_path, and a runner for the command-line flows."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from subprocess_env import flow_env

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def settings_for(tmp_path):
    """settings_for("target=fpga", ...) -> validated Settings writing under tmp_path."""
    from tasks.compose import load_settings

    def make(*overrides: str):
        s, _ = load_settings([f"paths.artifacts={tmp_path}", *overrides])
        return s

    return make


class FlowResult:
    def __init__(self, proc: subprocess.CompletedProcess):
        self.returncode, self.stdout, self.stderr = proc.returncode, proc.stdout, proc.stderr

    @property
    def plan_path(self) -> Path:
        last = self.stdout.strip().splitlines()[-1]
        assert last.startswith("plan: "), self.stdout
        return Path(last.removeprefix("plan: "))

    @property
    def plan(self) -> dict:
        return json.loads(self.plan_path.read_text())


@pytest.fixture
def run_flow():
    """run_flow("adapt", "target=cpu", ...) runs `python flows/<name>.py` as a user would."""
    def run(name: str, *args: str, timeout: int = 600) -> FlowResult:
        env = flow_env()
        proc = subprocess.run([sys.executable, str(ROOT / "flows" / f"{name}.py"), *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout)
        return FlowResult(proc)

    return run
