"""Tasks of a bucketed adapt (a static-shape target over model.shape_range): lay the buckets
out (metainfer_core.prepare.buckets), and once each bucket is adapted as a run of its own,
write buckets.json (metainfer_core.plan.bucketed) that load_plan serves the range from."""
from __future__ import annotations

import copy
import os
import time
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from app.progress import say as _progress
from metainfer_core.normalize.shape_range import describe
from metainfer_core.plan.bucketed import buckets_record, write_buckets
from metainfer_core.plan.plan_file import read_plan
from metainfer_core.prepare.buckets import BucketLayout, bucket_layout
from metainfer_core.prepare.stage import load_original
from tasks.adapt_tasks import Run


def needs_buckets(run: Run) -> bool:
    """A declared range on a target that compiles static shapes only."""
    return bool(run.s.model.shape_range) and run.backend.info.static_shapes


@task(name="buckets", cache_policy=NO_CACHE)
def buckets_task(run: Run) -> BucketLayout:
    model, source = load_original(run.s)
    layout = bucket_layout(model, run.s.model.shape_range, run.s.model.input_shapes or None, run.s.seed)
    listed = "; ".join(", ".join(f"{k} {v}" for k, v in b.items()) for b in layout.buckets)
    pads = ", ".join(f"{k} axes {v}" for k, v in layout.axes.items()) or "none (shapes must equal a bucket's)"
    _progress(f"buckets: {run.s.target.name} compiles static shapes: {describe(layout.ranges)} served by "
              f"{len(layout.buckets)} bucket(s), each adapted as a plan of its own: {listed}; padded along {pads}")
    return layout


def bucket_raw(raw: dict, shapes: dict[str, list[int]]) -> dict:
    """The composed configuration of one bucket's run: bound at the bucket's shapes, no range."""
    out = copy.deepcopy(raw)
    out["model"]["input_shapes"] = {**(out["model"].get("input_shapes") or {}), **shapes}
    out["model"]["shape_range"] = {}
    return out


@task(name="write_buckets", cache_policy=NO_CACHE)
def write_buckets_task(run: Run, layout: BucketLayout, plans: list[str]) -> str:
    """buckets.json in runs/<stamp>-<model>-<target>-buckets/, each bucket's run folder beside it."""
    folder = Path(run.s.artifacts) / "runs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{run.s.model.name}-" \
                                              f"{run.s.target.name}-buckets"
    entries = [(shapes, os.path.relpath(Path(plan).parent, folder), read_plan(Path(plan)).decision)
               for shapes, plan in zip(layout.buckets, plans)]
    return str(write_buckets(folder, buckets_record(layout.ranges, entries, layout.axes, layout.follows)))
