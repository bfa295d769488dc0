"""A stop signal ends a flow as stopped (exit 143/130, one "stopped by" line) even when a library
turned the exception the signal handler raised into an Exception of its own."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

BODY = textwrap.dedent("""
    import os, signal, sys, time
    from app.cli import run_cli

    def body(s, raw):
        try:                                  # a library that catches everything and raises its own error
            os.kill(os.getpid(), signal.{sig})
            time.sleep(5)
        except BaseException as exc:
            raise RuntimeError("wrapped: " + type(exc).__name__)
        return "never"

    sys.exit(run_cli(sys.argv[1:], body))
""")


def _run(sig: str, artifacts: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BODY.format(sig=sig), f"paths.artifacts={artifacts}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_wrapped_stop_signal_still_ends_as_stopped(tmp_path):
    for sig, code in (("SIGTERM", 143), ("SIGINT", 130)):
        done = _run(sig, tmp_path / "artifacts")
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert done.returncode == code, done.stderr[-2000:]
        assert len(errors) == 1 and f"stopped by {sig}" in errors[0], done.stderr[-2000:]
        assert "failed inside the pipeline" not in done.stderr


def test_prefects_sigterm_under_its_task_engines_error_counts_as_stopped():
    """Inside a flow Prefect's SIGTERM handler runs instead of ours; its task engine can then raise
    "Task run is not set" while unwinding. The run must still be marked KILLED, not FAILED."""
    from prefect.exceptions import TerminationSignal
    from app.cli import stopped_by

    try:
        try:
            raise TerminationSignal(signal=15)
        except TerminationSignal:
            raise ValueError("Task run is not set")
    except ValueError as exc:
        assert stopped_by(exc) == "SIGTERM"
    assert stopped_by(ValueError("an ordinary failure")) is None
