"""Which run folders a clean-up removes: all but the newest `keep` of each (model, target) pair,
never one that a protected MLflow run (an active plan, the plan it replaced) points at, nor one
whose plan.json cannot be read (it is not known whose it is)."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunFolderEntry:
    path: Path
    pair: tuple[str, str]           # (model, target)
    mlflow_run_id: str | None


def run_folders(artifacts: Path) -> list[RunFolderEntry]:
    """The committed run folders under artifacts/runs/, oldest first (names start with the date)."""
    out = []
    for folder in sorted((artifacts / "runs").glob("[!.]*")):
        try:
            plan = json.loads((folder / "plan.json").read_text())
            out.append(RunFolderEntry(folder, (plan["model"]["name"], plan["target"]["name"]), plan.get("mlflow_run_id")))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def to_remove(entries: list[RunFolderEntry], keep: int, protected_run_ids: set[str]) -> list[RunFolderEntry]:
    by_pair: dict[tuple[str, str], list[RunFolderEntry]] = {}
    for e in entries:
        by_pair.setdefault(e.pair, []).append(e)
    out = []
    for runs in by_pair.values():
        out += [e for e in runs[:-keep] if e.mlflow_run_id not in protected_run_ids]
    return out


def stale_partials(artifacts: Path, older_than_s: float = 3600) -> list[Path]:
    """Staging folders a killed run left (a live run's is younger than any run takes)."""
    now = time.time()
    return [p for p in (artifacts / "runs").glob(".*.partial") if now - p.stat().st_mtime > older_than_s]


def size_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
