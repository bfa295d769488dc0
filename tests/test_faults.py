"""Faults as an operator meets them (issue 17): adapts started together into an empty
paths.artifacts, SIGKILL / SIGTERM / Ctrl-C (SIGINT to the process group) at a stage boundary,
and stores that cannot be used. Each case runs `python flows/adapt.py` as a user would and checks
the outcome: exit code, one `error:` line, no traceback, no run folder, the MLflow run's end
state, the registry untouched and no temporary Prefect server left running.

One store is made by the first-use case and copied for the signal cases (a fresh folder's
migrations cost more than the runs themselves)."""
from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FAST = ["model=mlp", "search=quick", "profile.reps=3", "profile.warmup=1", "profile.batch_gradient=[1]",
        "verify.runs=3", "verify.warmup=1", "verify.samples=1"]


def _start(artifacts: Path, *overrides: str, log: Path) -> subprocess.Popen:
    """adapt in its own session, as a terminal runs a command in its own process group."""
    return subprocess.Popen([sys.executable, str(ROOT / "flows" / "adapt.py"), *overrides, f"paths.artifacts={artifacts}"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(log, "w"), text=True,
                            start_new_session=True)


def _wait_for(log: Path, text: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        assert proc.poll() is None, f"adapt ended before {text!r}: {log.read_text()[-2000:]}"
        assert time.monotonic() < deadline, f"no {text!r} within {timeout} s"
        time.sleep(0.05)


def _servers_of(pid: int) -> list[int]:
    """The temporary Prefect servers (uvicorn) started by process `pid`."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == pid and b"uvicorn" in cmdline:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _mlflow(artifacts: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(artifacts / "mlflow.db") as conn:
        return conn.execute(sql).fetchall()


def _no_run_folder(artifacts: Path) -> bool:
    return not (artifacts / "runs").exists() or not any((artifacts / "runs").iterdir())


def _one_error_line(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr[-3000:]
    return errors[0]


@pytest.fixture(scope="module")
def first_use(tmp_path_factory):
    """Two adapts started together into an empty paths.artifacts, with a model file that is
    refused in normalize: both migrate the stores (Prefect's, MLflow's, the fingerprint
    library) at once before they get there."""
    root = tmp_path_factory.mktemp("faults")
    model = root / "truncated.onnx"
    from metainfer_core.zoo import build
    model.write_bytes(build("mlp").SerializeToString()[:300])
    artifacts = root / "store"
    procs = [_start(artifacts, "model=file", f"model.path={model}", log=root / f"first{i}.log") for i in range(2)]
    results = [(p.wait(timeout=300), (root / f"first{i}.log").read_text()) for i, p in enumerate(procs)]
    return artifacts, results


@pytest.mark.slow
def test_concurrent_first_use_migrates_once(first_use):
    artifacts, results = first_use
    for rc, stderr in results:      # each gets to the model and refuses it: no migration error, no traceback
        assert rc == 2, stderr[-3000:]
        assert "is not a readable ONNX model" in _one_error_line(stderr)
    for db in (artifacts / "mlflow.db", artifacts / "fingerprints.db", artifacts / "prefect" / "prefect.db"):
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)], db
    assert "prefect " in (artifacts / ".stores.lock").read_text()       # migrated, by these versions
    # refused in normalize: no MLflow run, no experiment (beyond MLflow's Default), no run folder
    assert _mlflow(artifacts, "select count(*) from runs") == [(0,)]
    assert _mlflow(artifacts, "select name from experiments") == [("Default",)]
    assert _no_run_folder(artifacts)


def _signal_at(proc: subprocess.Popen, log: Path, text: str, sig: int, group: bool = False) -> tuple[int, float, list]:
    """Send `sig` once `text` is logged: (exit code, seconds to exit, servers it had started)."""
    _wait_for(log, text, proc)
    servers = _servers_of(proc.pid)
    t = time.monotonic()
    (os.killpg if group else os.kill)(proc.pid, sig)
    rc = proc.wait(timeout=60)
    return rc, time.monotonic() - t, servers


@pytest.mark.slow
def test_signals_at_stage_boundaries(first_use, tmp_path):
    """SIGKILL at profile (the next run marks its MLflow run FAILED), then SIGTERM at train; side
    by side, Ctrl-C (SIGINT to the process group) right after the decision, before tracking
    finished. Each in a copy of the first-use store."""
    killed, interrupted = tmp_path / "killed", tmp_path / "interrupted"
    for folder in (killed, interrupted):
        shutil.copytree(first_use[0], folder)
    with ThreadPoolExecutor(2) as pool:
        sigint = pool.submit(_signal_at, _start(interrupted, *FAST, log=tmp_path / "sigint.log"),
                             tmp_path / "sigint.log", "] decision:", signal.SIGINT, True)   # what Ctrl-C does
        rc, _, servers = _signal_at(_start(killed, *FAST, log=tmp_path / "sigkill.log"), tmp_path / "sigkill.log",
                                    "] profile:", signal.SIGKILL)
        assert rc == -signal.SIGKILL and len(servers) == 1
        deadline = time.monotonic() + 15        # the kernel tells the server that its run died
        while _alive(servers[0]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(servers[0]), "the temporary Prefect server outlived its SIGKILLed run"
        assert _mlflow(killed, "select status from runs") == [("RUNNING",)]
        sigterm = pool.submit(_signal_at, _start(killed, *FAST, log=tmp_path / "sigterm.log"),
                              tmp_path / "sigterm.log", "] train:", signal.SIGTERM)
        for future, name, code, folder in ((sigterm, "SIGTERM", 143, killed), (sigint, "SIGINT", 130, interrupted)):
            rc, seconds, servers = future.result()
            assert rc == code and seconds < 15, (name, rc, seconds)
            assert f"stopped by {name}" in _one_error_line((tmp_path / f"{name.lower()}.log").read_text())
            assert len(servers) == 1 and not _alive(servers[0]), name
            assert _no_run_folder(folder), name
    states = dict(_mlflow(killed, "select r.status, t.value from runs r left join tags t "
                                  "on t.run_uuid = r.run_uuid and t.key = 'error'"))
    assert set(states) == {"FAILED", "KILLED"}, states       # the SIGKILLed run, marked by the SIGTERMed one
    assert "ended without ending the run" in states["FAILED"]
    assert _mlflow(interrupted, "select status from runs") == [("KILLED",)]
    assert _mlflow(interrupted, "select count(*) from model_versions") == [(0,)]     # registry untouched


def _corrupt(path: Path) -> None:
    with open(path, "r+b") as fh:
        fh.write(b"\x00garbage" * 12)       # the 100-byte header: not a database any more
    for side in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        side.unlink(missing_ok=True)


@pytest.mark.slow
def test_unusable_stores_are_refused_in_one_paragraph(first_use, tmp_path):
    """Each refused with exit 2 naming the file or folder and what to do, before anything is written."""
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("a file where the artifacts folder should be\n")
    cases = {"unwritable": (not_a_folder / "artifacts", ["cannot be written", "paths.artifacts="])}
    for db in ("mlflow.db", "fingerprints.db"):
        folder = tmp_path / db.replace("/", "_")
        shutil.copytree(first_use[0], folder)
        _corrupt(folder / db)
        cases[db] = (folder, [str(folder / db), "not a usable SQLite database", f"mv {folder / db}"])
    procs = {case: _start(folder, *FAST, log=tmp_path / f"{case.replace('/', '_')}.log")
             for case, (folder, _) in cases.items()}
    for case, proc in procs.items():
        folder, fragments = cases[case]
        assert proc.wait(timeout=120) == 2, case
        error = _one_error_line((tmp_path / f"{case.replace('/', '_')}.log").read_text())
        for fragment in fragments:
            assert fragment in error, (case, fragment, error)
        assert not_a_folder.is_file() and (case == "unwritable" or _no_run_folder(folder))
