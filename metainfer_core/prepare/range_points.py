"""The inputs every plan is judged on at the shape range's points other than the tuned one, and
the original model's outputs on them: data.inputs' group of the point's shape, else its judging
samples cropped or tiled to the point (real values: a plan calibrated on them is not judged on
values it clips), else random inputs."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np
import onnx

from metainfer_core.accuracy.holdout import SampleSet
from metainfer_core.accuracy.metric import make_loss, run_cpu
from metainfer_core.errors import MetaInferError
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.normalize.inputs import fit_to_shape, sample_feeds
from metainfer_core.normalize.shape_range import Point
from metainfer_core.prepare.served_shapes import ServedShapes
from metainfer_core.settings import Settings

Progress = Callable[[str], None]
PathFailure = Callable[..., "tuple[str, str] | None"]     # backends/host.py HostBackend.path_failure


def _point_feeds(s: Settings, model: onnx.ModelProto, point: Point, k: int,
                 groups: dict[str, dict[str, np.ndarray]] | None, real: list[dict[str, np.ndarray]] | None
                 ) -> tuple[list[dict[str, np.ndarray]], np.ndarray | None]:
    """data.inputs' group of the point's shape; else real samples (`real`: the judging ones)
    cropped or tiled to it; else random inputs."""
    for arrays in (groups or {}).values():
        if all(list(arrays[name].shape[1:]) == shape for name, shape in point.shapes.items() if name in arrays):
            return sample_feeds(model, arrays, s.data.inputs, s.data.labels_key, shapes=point.shapes)
    if real:
        return [{name: fit_to_shape(v, point.shapes[name]) if name in point.shapes else v for name, v in f.items()}
                for f in real[:POINT_SAMPLES]], None
    return [random_feeds(model, seed=s.seed + POINT_SEED + POINT_SAMPLES * k + j, shapes=point.shapes)
            for j in range(POINT_SAMPLES)], None


POINT_SAMPLES = 2           # random inputs per point of the shape range other than the tuned one
POINT_SEED = 2000           # their seeds: apart from the calibration and held-out ones


def point_sets_of(s: Settings, model: onnx.ModelProto, served: ServedShapes, progress: Progress,
                groups: dict[str, dict[str, np.ndarray]] | None = None,
                real: list[dict[str, np.ndarray]] | None = None,
                path_failure: PathFailure | None = None, tuned: dict[str, np.ndarray] | None = None
                ) -> list[tuple[Point, SampleSet]]:
    """The inputs and the reference outputs at each point of the range but the tuned one: the
    samples of data.inputs' group of that shape, else its judging samples cropped or tiled to
    it, else random ones. A declared range the model itself cannot run at is refused; a derived
    point (half or double the tuned size) the model cannot run at is dropped, and a run warning
    says so. So is a derived point where another execution path the target offers cannot run
    the model while it runs it on `tuned` (`path_failure`; e.g. a pooling window wider than the
    input there): the range was a guess, and kept, it would rule that path out at every shape."""
    sets, kept = [], []
    for k, point in enumerate(served.points):
        if point.name == "opt":
            kept.append(point)
            continue
        try:
            feeds, labels = _point_feeds(s, model, point, k, groups, real)
            reference = run_cpu(model, feeds)
            failed = None if served.declared or path_failure is None or tuned is None else \
                path_failure(model, feeds[0], tuned)
            if failed:
                served.dropped.append(f"shapes: execution path {failed[0]} cannot run the model at {point.where()} "
                                      f"({point.name} of the range derived from the tuned shape: {failed[1]}); not "
                                      "verified there, for plans on any path")
                progress(f"WARNING: {served.dropped[-1]}")
                continue
            sets.append((point, SampleSet(feeds, reference, make_loss(s.accuracy.metric, labels))))
            kept.append(point)
        except Exception as exc:  # noqa: BLE001 - the model's own limit (a position table, a stride), said below
            why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            where = point.where()
            if served.declared:
                raise MetaInferError(f"model.shape_range reaches shapes the model itself cannot run at: at {point.name} "
                                     f"({where}) ONNX Runtime fails on the original model ({why}). Narrow "
                                     "model.shape_range to the shapes the model accepts.") from None
            served.dropped.append(f"shapes: the model does not run at {where} ({point.name} of the range derived from "
                                  f"the tuned shape: {why}); not verified there")
            progress(f"WARNING: {served.dropped[-1]}")
    total = sum(p.weight for p in kept) or 1.0     # the dropped points' weight shared among the others
    served.points = [replace(p, weight=p.weight / total) for p in kept]
    return [(replace(p, weight=p.weight / total), ss) for p, ss in sets]
