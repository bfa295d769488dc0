"""flows/adapt.py in a subprocess, exactly as a user runs it (what bench/modelset.py, and through it
bench/suite.py and bench/adapt_corpus.py, adapt with): its exit code, wall time, the plan.json it
wrote or its error paragraph, with an optional timeout."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent


def _error_paragraph(err_lines: list[str]) -> str:
    """The last 'error:' paragraph adapt printed (to the end of stderr), else stderr's tail."""
    err = [ln for ln in err_lines if ln.strip()]
    marked = [i for i, ln in enumerate(err) if ln.startswith("error:")]
    return "\n".join(err[marked[-1]:]) if marked else "\n".join(err[-8:]) or "(no output)"


def adapt(args: list[str], on_line: Callable[[str], None] | None = None, timeout: float | None = None) -> dict:
    """flows/adapt.py target=cpu <args> in a subprocess (its own process group: a timeout ends it
    and whatever it started, e.g. the temporary Prefect server); stderr lines go to on_line as
    they come. Returns {rc (exit code, or "timeout"), wall_s, plan_path (its plan.json), plan
    (the parsed plan.json), error (the last 'error:' paragraph or the tail of stderr; '' when a
    plan came back), stderr}."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(ROOT / "flows" / "adapt.py"), "target=cpu", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
    reader.start()     # stdout drained beside stderr: a full pipe must not stall the run
    expired = threading.Event()

    def end_group():
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def on_timeout():
        expired.set()
        end_group()

    timer = threading.Timer(timeout, on_timeout) if timeout else None
    if timer:
        timer.daemon = True
        timer.start()
    err_lines: list[str] = []
    try:
        for line in proc.stderr:
            err_lines.append(line.rstrip())
            if on_line:
                on_line(line.rstrip())
        rc = proc.wait()
    except BaseException:   # interrupted: the adapt must not outlive the caller
        end_group()
        raise
    finally:
        if timer:
            timer.cancel()
    reader.join()
    wall = time.perf_counter() - t0
    stderr = "\n".join(err_lines)
    if expired.is_set():
        last = "\n".join([ln for ln in err_lines if ln.strip()][-3:])
        return {"rc": "timeout", "wall_s": wall, "plan_path": None, "plan": None, "stderr": stderr,
                "error": f"no result within {timeout:.0f} s; last progress lines:\n{last}"}
    lines = "".join(out).strip().splitlines()
    if rc == 0 and lines and lines[-1].startswith("plan: "):
        plan_path = Path(lines[-1].removeprefix("plan: "))
        return {"rc": rc, "wall_s": wall, "plan_path": plan_path, "plan": json.loads(plan_path.read_text()),
                "error": "", "stderr": stderr}
    return {"rc": rc, "wall_s": wall, "plan_path": None, "plan": None, "error": _error_paragraph(err_lines),
            "stderr": stderr}


def run_adapt(args: list[str], on_line: Callable[[str], None] | None = None) -> tuple[Path | None, str]:
    """adapt() without a timeout, as (plan.json path, '') or (None, the error paragraph)."""
    r = adapt(args, on_line)
    return r["plan_path"], r["error"]
