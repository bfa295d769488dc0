"""Faults as an operator meets them (issue 17): adapts started together into an empty
paths.artifacts, SIGKILL / SIGTERM / Ctrl-C (SIGINT to the process group) at a stage boundary,
stores that cannot be used, and flows/gc.py's retention. Each case runs `python flows/adapt.py` as a user would and checks
the outcome: exit code, one `error:` line, no traceback, no run folder, the MLflow run's end
state, the registry untouched and no temporary Prefect server left running.

One store is made by the first-use case and copied for the signal cases (a fresh folder's
migrations cost more than the runs themselves)."""
from __future__ import annotations

import json
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
from mlflow.tracking import MlflowClient

from app.tracking.registry import promote, protected_runs
from app.tracking.runs import start_run
from metainfer_core.plan.retention import run_folders, stale_partials, to_remove

ROOT = Path(__file__).resolve().parents[2]
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
@pytest.mark.alone         # each run must end within 15 s of its signal
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
            assert rc == code and seconds < 15, (name, rc, seconds, (tmp_path / f"{name.lower()}.log").read_text()[-3000:])
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


def _run_folder(artifacts: Path, name: str, model: str, run_id: str) -> Path:
    folder = artifacts / "runs" / name
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(b"x" * 1000)
    (folder / "plan.json").write_text(json.dumps({"model": {"name": model}, "target": {"name": "npu"},
                                                  "mlflow_run_id": run_id, "artifact": str(folder / "model.onnx")}))
    return folder


@pytest.mark.slow
def test_gc_keeps_the_newest_per_pair_and_the_active_plans(first_use, tmp_path):
    """flows/gc.py (issue 17, disk): the newest gc.keep run folders per (model, target) pair stay,
    and so do the active plan's and the one it replaced, whatever their age; a stale staging
    folder goes. In a copy of the first-use store: its MLflow database is migrated already."""
    from app.compose import load_settings

    tmp_path = tmp_path / "store"
    shutil.copytree(first_use[0], tmp_path)
    s, raw = load_settings([f"paths.artifacts={tmp_path}", "target=npu"])
    folders = {}
    for i, decision in enumerate(["adapted", "adapted", "rolled_back", "rolled_back", "rolled_back"]):
        run_id = start_run(s, raw, "mlp", f"r{i}")
        folders[i] = _run_folder(tmp_path, f"2026010{i}-mlp-npu", "mlp", run_id)
        promote(s, run_id, {"decision": decision, "fingerprint_version": "v",
                            "artifact": str(folders[i] / "model.onnx")}, "mlp")
    other = _run_folder(tmp_path, "20260101-bert-npu", "bert", "no-such-run")      # another pair: its newest stays
    partial = tmp_path / "runs" / ".20260109-mlp-npu.partial"
    partial.mkdir()
    os.utime(partial, (time.time() - 7200, time.time() - 7200))
    (tmp_path / "runs" / ".20260110-mlp-npu.partial").mkdir()                 # a live run's: young, stays

    protected = protected_runs(s)       # run 1 is active (adapted last), run 0 the plan it replaced
    doomed = {e.path for e in to_remove(run_folders(tmp_path), 2, protected)}
    assert doomed == {folders[2]}, doomed
    assert stale_partials(tmp_path) == [partial]
    version = MlflowClient(tracking_uri=s.tracking.mlflow_uri).get_model_version("mlp.npu", "2")
    assert Path(version.source) == folders[1] / "model.onnx"      # embedded: the registry points at the run folder

    res = subprocess.run([sys.executable, str(ROOT / "flows" / "gc.py"), f"paths.artifacts={tmp_path}", "gc.keep=2"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "gc: removed 2 run folders (0.0 MB), kept 5"
    assert not folders[2].exists() and not partial.exists() and other.exists()
    assert all(folders[i].exists() for i in (0, 1, 3, 4))
