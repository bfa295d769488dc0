"""The Prefect flow run as the UI shows it: named and tagged like the run it records (the run
folder's name, the model and the target), not a random name, with plan.md as its Markdown
artifact."""
from __future__ import annotations

import re
from pathlib import Path

from prefect.artifacts import create_markdown_artifact
from prefect.client.orchestration import get_client
from prefect.context import FlowRunContext


def label_flow_run(name: str, tags: list[str]) -> None:
    """Rename the current flow run and add `tags` (nothing outside a flow run)."""
    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return
    with get_client(sync_client=True) as client:
        client.update_flow_run(ctx.flow_run.id, name=name, tags=sorted(set(ctx.flow_run.tags) | set(tags)))


def publish_report(folder: Path, model: str, target: str) -> None:
    """plan.md as the flow run's Markdown artifact, keyed by (model, target): the UI's artifact
    page then lists a pair's runs one after the other."""
    report = folder / "plan.md"
    if FlowRunContext.get() is None or not report.is_file():
        return
    key = re.sub(r"[^a-z0-9-]+", "-", f"plan-{model}-{target}".lower()).strip("-")
    create_markdown_artifact(report.read_text(), key=key, description=f"plan.md of {folder.name}")
