"""Everything a run writes goes under paths.artifacts, from whatever directory the user runs it
(issue 17): Prefect's home (its database, profiles, storage) comes from the composed settings
before prefect is imported, relative paths against the directory the user ran from, and conf/
is found beside the code."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _snapshot(*folders: Path) -> dict[str, tuple[float, int]]:
    out = {}
    for folder in folders:
        if folder.is_dir():
            for p in folder.rglob("*"):
                if p.is_file():
                    st = p.stat()
                    out[str(p)] = (st.st_mtime, st.st_size)
    return out


@pytest.mark.slow
@pytest.mark.alone         # watches the checkout's artifacts/ and ~/.prefect: no other test may write there meanwhile
def test_adapt_from_another_directory_writes_only_under_paths_artifacts(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    watched = [ROOT / "artifacts", elsewhere, Path.home() / ".prefect"]
    before = _snapshot(*watched)
    # a relative paths.artifacts is taken against the directory the user ran from
    proc = subprocess.run([sys.executable, str(ROOT / "flows" / "adapt.py"), "model=mlp", "search=quick",
                           "paths.artifacts=out"], cwd=elsewhere, env=dict(os.environ), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    artifacts = elsewhere / "out"
    plan = Path(proc.stdout.strip().splitlines()[-1].removeprefix("plan: "))
    assert plan.is_file() and artifacts in plan.parents
    assert (artifacts / "prefect" / "prefect.db").is_file()       # Prefect's home is under paths.artifacts
    assert (artifacts / "mlflow.db").is_file() and (artifacts / "fingerprints.db").is_file()
    after = _snapshot(*watched)
    changed = sorted(p for p, v in after.items() if before.get(p) != v and artifacts not in Path(p).parents)
    assert not changed, changed
    assert not (elsewhere / "mlruns").exists() and not (ROOT / "mlruns").exists()
    assert "Traceback" not in proc.stderr
