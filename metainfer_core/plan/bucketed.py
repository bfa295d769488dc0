"""A bucketed plan (static-shape targets over a shape range, prepare/buckets.py): `buckets.json`
beside one run folder per bucket, and the loader that pads an input up to the smallest bucket
that holds it, runs that bucket's plan and crops the outputs back.

    from metainfer_core.plan.deployable import load_plan
    plan = load_plan("artifacts/runs/<run>-buckets")     # a folder holding buckets.json
    outputs = plan({"input": x})"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

from metainfer_core.errors import MetaInferError
from metainfer_core.normalize.shape_range import Ranges, from_json, outside, to_json
from metainfer_core.prepare.buckets import Shapes, pad_to

BUCKETS_FILE = "buckets.json"
BUCKETS_SCHEMA = "meta-infer/buckets/v1"


def buckets_record(ranges: Ranges, buckets: list[tuple[Shapes, str, str]], axes: dict[str, list[int]],
                   follows: dict[str, dict[str, dict[str, int]]]) -> dict[str, Any]:
    """buckets.json's content: `buckets` as (shapes, run folder name, decision) each."""
    return {"schema": BUCKETS_SCHEMA, "range": to_json(ranges),
            "buckets": [{"shapes": s, "run": run, "decision": d} for s, run, d in buckets],
            "paddable_axes": axes, "output_axes": follows,
            "note": "an input is zero-padded up to the smallest bucket that holds it along the paddable axes only "
                    "(measured on the original model: padding there changes nothing but the padded rows); along "
                    "any other axis its size must equal a bucket's"}


def write_buckets(folder: Path, record: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / BUCKETS_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(path)       # never half-written
    return path


class BucketedPlan:
    """One deployable plan per bucket, compiled on first use."""

    def __init__(self, folder: Path, record: dict[str, Any], load: Callable[[Path, int | None], Any],
                 threads: int | None = None):
        """load: how one bucket's run folder is loaded (deployable.load_plan)."""
        self.folder, self.threads, self._load = folder, threads, load
        self.ranges = from_json(record["range"])
        self.buckets = [(b["shapes"], folder / b["run"]) for b in record["buckets"]]
        self.axes = {k: set(v) for k, v in record.get("paddable_axes", {}).items()}
        self.follows = record.get("output_axes", {})
        self._loaded: dict[int, Any] = {}

    def __call__(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.run(feeds)

    def bucket_for(self, shapes: dict[str, tuple[int, ...]]) -> int:
        """The index of the smallest bucket that holds `shapes`; MetaInferError when none does."""
        problem = outside(self.ranges, shapes)
        if problem:
            raise MetaInferError(problem)
        for i, (bucket, _) in enumerate(self.buckets):
            if all(self._fits(name, shapes[name], dims) for name, dims in bucket.items() if name in shapes):
                return i
        listed = "; ".join(", ".join(f"{k} {v}" for k, v in b.items()) for b, _ in self.buckets)
        pads = ", ".join(f"{k} axes {sorted(v)}" for k, v in self.axes.items()) or "none"
        raise MetaInferError(
            f"No bucket of {self.folder} holds inputs of shapes {dict((k, list(v)) for k, v in shapes.items())}: "
            f"the buckets are {listed}, and inputs are padded only along axes where padding was measured to change "
            f"nothing but the padded rows ({pads}); along other axes a size must equal a bucket's. Give a bucket's "
            "size there, or adapt on a target with dynamic shapes.")

    def _fits(self, name: str, shape: tuple[int, ...], dims: list[int]) -> bool:
        return len(shape) == len(dims) and all(
            n == d or (a in self.axes.get(name, ()) and n <= d) for a, (n, d) in enumerate(zip(shape, dims)))

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        shapes = {k: tuple(np.shape(v)) for k, v in feeds.items()}
        i = self.bucket_for(shapes)
        bucket, run_folder = self.buckets[i]
        if i not in self._loaded:
            self._loaded[i] = self._load(run_folder, self.threads)
        padded = {k: pad_to(np.asarray(v), bucket[k]) if k in bucket else v for k, v in feeds.items()}
        outputs = self._loaded[i].run(padded)
        names = self._loaded[i].output_names
        return [self._crop(name, out, shapes, bucket) for name, out in zip(names, outputs)]

    def _crop(self, output: str, value: np.ndarray, shapes: dict[str, tuple[int, ...]], bucket: Shapes) -> np.ndarray:
        """`value` with the rows padding added cut off: each padded input axis's output axis
        shortened by as much as the input was padded."""
        index = [slice(None)] * value.ndim
        for name, axes in self.axes.items():
            for a in axes:
                axis = self.follows.get(name, {}).get(str(a), {}).get(output)
                short = bucket[name][a] - shapes[name][a] if name in shapes else 0
                if axis is not None and short > 0:
                    index[axis] = slice(0, value.shape[axis] - short)
        return value[tuple(index)]


def load_buckets(folder: Path, load: Callable[[Path, int | None], Any], threads: int | None = None) -> BucketedPlan:
    path = folder / BUCKETS_FILE
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise MetaInferError(f"{path} cannot be read as a bucketed plan ({exc}); run flows/adapt.py again.") from None
    if record.get("schema") != BUCKETS_SCHEMA:
        raise MetaInferError(f"{path} has schema {record.get('schema')!r}, which this version does not read (it reads "
                             f"{BUCKETS_SCHEMA!r}); run flows/adapt.py again.")
    return BucketedPlan(folder, record, load, threads)
