"""Runs left RUNNING by a process that died (SIGKILL, out of memory, power loss) are marked FAILED
by the next run of the same experiment: each run tags the process that owns it, and a later run
on the same host checks whether that process still lives."""
from __future__ import annotations

import os
import socket
from pathlib import Path

from mlflow.tracking import MlflowClient


def process_tag() -> str:
    """This process, so that a later run can tell whether it still lives: host, pid and start
    time (a pid is re-used once its process has gone)."""
    return f"{socket.gethostname()}:{os.getpid()}:{_started(os.getpid())}"


def _started(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]    # field 22: starttime
    except (OSError, IndexError):
        return ""


def _gone(process: str) -> bool:
    host, _, rest = process.partition(":")
    pid, _, started = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False        # another host's run: it may well be alive
    return _started(int(pid)) != started


def fail_dead_runs(client: MlflowClient, exp_ids: list[str], by: str) -> list[str]:
    """Mark FAILED the runs of the experiments left RUNNING by a process of this host that has
    gone (SIGKILL, out of memory, power loss): nothing else would end them."""
    dead = [r for r in client.search_runs(exp_ids, "attributes.status = 'RUNNING'", max_results=1000)
            if r.data.tags.get("process") and _gone(r.data.tags["process"])]
    for r in dead:
        client.set_tag(r.info.run_id, "error", f"its process ({r.data.tags['process']}) ended without ending the run "
                                               f"(killed?); marked FAILED by run {by}")
        client.set_terminated(r.info.run_id, "FAILED")
    return [r.info.run_id for r in dead]
