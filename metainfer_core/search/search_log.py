"""The search log (search_log.json): one entry per expansion made or pruned, in order."""
from __future__ import annotations

from metainfer_core.actions import Step


def first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""


def entry(level: int, steps: tuple[Step, ...], **fields) -> dict:
    """One entry: the level, the plan's steps (kind and parameters), what happened."""
    return {"level": level, "steps": [f"{s.kind}(" + ", ".join(f"{k}={v}" for k, v in s.params) + ")" for s in steps],
            **{k: v for k, v in fields.items() if v is not None}}
