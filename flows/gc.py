"""Disk retention:  python flows/gc.py [gc.keep=5] [gc.dry_run=true] [paths.artifacts=...]

Removes the run folders under paths.artifacts/runs/ beyond the newest gc.keep of each (model,
target) pair, except those of active plans and of the plans they replaced (flows/rollback.py's
target), and staging folders killed runs left. MLflow runs and registry entries stay. The last
stdout line is `gc: removed <n> run folders (<MB> MB), kept <m>`."""
from __future__ import annotations

import shutil
import sys

from app.cli import run_cli
from app.tracking.registry import protected_runs
from metainfer_core.plan.retention import run_folders, size_bytes, stale_partials, to_remove


def _body(s, raw) -> str:
    entries = run_folders(s.artifacts)
    removed = [e.path for e in to_remove(entries, s.gc.keep, protected_runs(s))]
    doomed = removed + stale_partials(s.artifacts)
    freed = 0
    for path in doomed:
        freed += size_bytes(path)
        print(f"[meta-infer] gc: {'would remove' if s.gc.dry_run else 'removing'} {path}", file=sys.stderr)
        if not s.gc.dry_run:
            shutil.rmtree(path, ignore_errors=True)
    verb = "would remove" if s.gc.dry_run else "removed"
    return f"gc: {verb} {len(doomed)} run folders ({freed / 1e6:.1f} MB), kept {len(entries) - len(removed)}"


def main(argv: list[str]) -> int:
    return run_cli(argv, _body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
