"""Reading plan.json: the one thing a deployment needs of the plan record, kept apart from
writing it (plan/record.py), which needs the report, the search's words and the predictor: a
process that only serves a plan imports none of them."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from metainfer_core.errors import MetaInferError
from metainfer_core.plan.schema import Plan

NODES_FILE = "plan_nodes.json"


def read_plan(path: Path) -> Plan:
    """plan.json (`path`: the file or its run folder) with its per-node lists put back (a plan
    written before the side file existed, or without it, reads as it is), checked against the
    schema: a file that is not such a plan is a one-paragraph MetaInferError."""
    path = Path(path)
    path = path / "plan.json" if path.is_dir() else path
    try:
        plan = json.loads(path.read_text())
    except ValueError as exc:
        raise MetaInferError(f"{path} is not a meta-infer plan: it is not JSON ({exc}). It may have been cut short "
                             "or edited by hand; run flows/adapt.py again for a complete one.") from None
    return Plan.of(_with_node_lists(plan, path), str(path))


def _with_node_lists(plan: Any, path: Path) -> Any:
    """plan.json's content with the side file's per-node lists put back, where it has them."""
    if not isinstance(plan, dict) or "node_lists" not in plan:
        return plan
    side = path.with_name(plan.get("node_lists") or NODES_FILE)
    if not side.is_file():
        return plan
    lists = json.loads(side.read_text())["candidates"]
    plan = {k: v for k, v in plan.items() if k != "node_lists"}
    for c, full in zip(plan.get("candidates") or [], lists):
        for a, nodes in zip(c.get("actions") or [], full["action_nodes"]):
            a.pop("n_nodes", None)
            a["nodes"] = nodes
        if full.get("binding_host") is not None:
            c["binding"].pop("host_kernels", None)
            c["binding"]["host"] = full["binding_host"]
    return plan
