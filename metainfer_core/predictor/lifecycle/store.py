"""Predictors on disk, per fingerprint version: numbered revisions (r1/, r2/ ...), a pointer
to the current one, a stale flag, and a history of what happened (trained, fine-tune kept or
refused, marked stale). A revision is never overwritten, so every one stays loadable. The
stale flag outlives retraining on the same records (they are what may be out of date); the
re-profiling job clears it."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path


class PredictorStore:
    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def revisions(self) -> list[int]:
        if not self.folder.is_dir():
            return []
        return sorted(int(p.name[1:]) for p in self.folder.glob("r*")
                      if p.name[1:].isdigit() and (p / "meta.json").is_file())

    def path(self, revision: int) -> Path:
        return self.folder / f"r{revision}"

    def new_revision_path(self) -> tuple[int, Path]:
        self.folder.mkdir(parents=True, exist_ok=True)
        rev = max(self.revisions(), default=0)
        while True:             # mkdir is atomic: concurrent trainers get distinct numbers
            rev += 1
            try:
                self.path(rev).mkdir()
                return rev, self.path(rev)
            except FileExistsError:
                continue

    def current(self) -> int | None:
        f = self.folder / "current.json"
        if not f.is_file():
            return None
        rev = json.loads(f.read_text()).get("revision")
        return rev if rev in self.revisions() else None

    def set_current(self, revision: int) -> None:
        self._write("current.json", {"revision": revision})

    def log(self, event: str, **details) -> dict:
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "event": event, **details}
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / "history.jsonl", "a") as f:
            f.write(json.dumps(entry, default=str) + "\n")
        return entry

    def history(self) -> list[dict]:
        f = self.folder / "history.jsonl"
        return [json.loads(line) for line in f.read_text().splitlines() if line.strip()] if f.is_file() else []

    def mark_stale(self, reason: str, **details) -> None:
        self._write("stale.json", {"reason": reason, **details})
        self.log("marked_stale", reason=reason, **details)

    def stale(self) -> dict | None:
        f = self.folder / "stale.json"
        return json.loads(f.read_text()) if f.is_file() else None

    def clear_stale(self) -> None:
        (self.folder / "stale.json").unlink(missing_ok=True)

    def _write(self, name: str, data: dict) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{name}.tmp"
        tmp.write_text(json.dumps(data, indent=2, default=str))
        os.replace(tmp, self.folder / name)
