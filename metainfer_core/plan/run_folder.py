"""A run's folder, staged in one place: the chosen model, the default beside it (re-profiling
re-verifies the plan against it), the normalized model's feature map and log, the search's log,
plan.json and plan.md with its plots. Written into the hidden staging folder (plan/record.py's RunFolder),
which any failure discards: nothing half-written is left; the caller commits it."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import onnx

from metainfer_core.plan.plots import write_plots
from metainfer_core.plan.record import RunFolder, write_plan
from metainfer_core.plan.report import plan_markdown
from metainfer_core.plan.schema import Plan
from metainfer_core.plan.shapes_report import write_shapes_plot


def stage_run(artifacts: Path, run_name: str, prepared, chosen_model: onnx.ModelProto,
              plan_of: Callable[[Path], Plan], warn: Callable[[str], None],
              search_log: list[dict] | None = None) -> tuple[RunFolder, Plan]:
    """plan_of(artifact): plan.json for the chosen model at its final path (plan/record.py's
    build_plan); search_log: every expansion the search made or pruned (search_log.json), when
    it searched."""
    folder = RunFolder(artifacts, run_name)
    try:
        folder.path("model.onnx").write_bytes(chosen_model.SerializeToString())
        folder.path("default.onnx").write_bytes(prepared.model.SerializeToString())
        folder.write_json("feature_map.json", prepared.feature_map)
        folder.write_json("normalize_log.json", {"log": prepared.normalized.log,
                                                 "max_abs_err": prepared.normalized.max_abs_err})
        if search_log is not None:
            folder.write_json("search_log.json", search_log)
        plan = plan_of(folder.final / "model.onnx")
        write_plan(folder.staging, plan)
        content = plan.to_dict()        # plan.md renders plan.json's content, as it does an old run folder's
        folder.path("plan.md").write_text(plan_markdown(content, _plots(content, folder, warn)))
    except BaseException:
        folder.discard()
        raise
    return folder, plan


def _plots(plan: dict, folder: RunFolder, warn: Callable[[str], None]) -> list[tuple[str, str]]:
    try:
        return write_plots(plan, folder.staging) + write_shapes_plot(plan, folder.staging)
    except Exception as exc:  # noqa: BLE001 - a plot is not worth the run: plan.md goes without it
        warn(f"WARNING: plan.md's plots could not be drawn ({type(exc).__name__}: {exc})")
        return []
