"""Restore the previous active plan of a (model, target) pair:
python flows/rollback.py model=<name> target=<name>   (model=file model.path=... works too)

Moves the MLflow Model Registry alias `active` back to the version the current one replaced.
The last stdout line is `active: <registered model> version <n>`."""
from __future__ import annotations

import sys

from app.cli import run_cli
from app.tracking.registry import roll_back_active


def _body(s, raw) -> str:
    name, old, new = roll_back_active(s, s.model.name)
    print(f"[meta-infer] rollback: {name} active plan moved from version {old} back to version {new}", file=sys.stderr)
    return f"active: {name} version {new}"


def main(argv: list[str]) -> int:
    return run_cli(argv, _body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
