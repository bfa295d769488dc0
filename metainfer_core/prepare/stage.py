"""The normalize stage: load the model (zoo or file), normalize it, and make what every later
stage runs on: the validation (and calibration) inputs, the fp32 reference outputs on them and
the accuracy metric (`Prepared`)."""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx

from metainfer_core import zoo
from metainfer_core.accuracy.holdout import HOLD_OUT_EVERY, SampleSet, split, too_few_note
from metainfer_core.accuracy.metric import LossFn, degenerate_outputs, make_loss, plan_loss, run_cpu
from metainfer_core.errors import MetaInferError
from metainfer_core.ir.features import model_feature_map
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.normalize import NormalizeResult, load_model, normalize, unbound_inputs
from metainfer_core.normalize.shape_range import Point
from metainfer_core.prepare.range_points import PathFailure, point_sets_of
from metainfer_core.prepare.served_shapes import ServedShapes, served_shapes
from metainfer_core.settings import Settings

Progress = Callable[[str], None]


@dataclass
class Prepared:
    name: str
    source: str
    sha256: str
    normalized: NormalizeResult
    feature_map: dict
    feeds: list[dict[str, np.ndarray]]      # the calibration samples (int8 ranges, sensitivity, guard, search)
    reference: list[list[np.ndarray]]
    degenerate: list[str]          # outputs whose reference is near-constant on these inputs
    loss_fn: LossFn = plan_loss     # accuracy.metric, bound to the calibration samples' labels if any
    seconds: float = 0.0
    # the samples that judge accuracy loss against the bound (accuracy/holdout.py); None: too few
    # samples to hold any out, the calibration samples judge too (`warnings` says so)
    held_out: SampleSet | None = None
    judged_on: str = "the calibration samples"     # where the held-out samples came from, in words
    warnings: list[str] = field(default_factory=list)
    # what rewrites compute once per run (int8 calibration ranges: seconds of model runs on a large
    # model), shared by the profile's variants, the search and the accuracy guard
    action_cache: dict = field(default_factory=dict, repr=False)
    served: ServedShapes | None = None      # the shape range, tuned sizes and verified points
    # the range's other points (min, max, ...): inputs at each and the original's outputs on them
    point_sets: list[tuple[Point, SampleSet]] = field(default_factory=list)

    @property
    def model(self) -> onnx.ModelProto:
        return self.normalized.model

    @property
    def judge(self) -> SampleSet:
        """The samples accuracy is judged on: the held-out ones, else the calibration ones."""
        return self.held_out or SampleSet(self.feeds, self.reference, self.loss_fn)


def load_original(s: Settings) -> tuple[onnx.ModelProto, str]:
    """The model as the settings name it (zoo or file), and where it came from."""
    if s.model.source == "zoo":
        model = zoo.build(s.model.name, seed=s.seed)
        return model, f"zoo:{s.model.name}"
    return load_model(s.model.path), str(Path(s.model.path).resolve())


def _validation_feeds(s: Settings, model: onnx.ModelProto, samples: dict[str, np.ndarray] | None = None
                      ) -> tuple[list[dict[str, np.ndarray]], np.ndarray | None]:
    """Validation (and calibration) inputs, plus labels when the .npz has them: data.inputs'
    samples (`samples`: its arrays, already loaded) checked against the model's inputs, else
    seeded random inputs (integers within what the graph allows)."""
    from metainfer_core.normalize.inputs import load_samples, sample_feeds

    if s.data.inputs is None:
        return [random_feeds(model, seed=s.seed + i) for i in range(s.verify.samples)], None
    return sample_feeds(model, load_samples(s.data.inputs) if samples is None else samples, s.data.inputs,
                        s.data.labels_key)


RANDOM_HELD_OUT_SEED = 1000     # held-out random inputs: seeds apart from the calibration ones


def _held_out(s: Settings, model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], labels: np.ndarray | None
              ) -> tuple[tuple[list[dict[str, np.ndarray]], np.ndarray | None],
                         tuple[list[dict[str, np.ndarray]], np.ndarray | None] | None, str, list[str]]:
    """(calibration (feeds, labels), held-out (feeds, labels) or None, where those came from,
    warnings): data.validation's samples when given, else every third sample of data.inputs (accuracy/holdout.py); without
    data.inputs, random inputs of other seeds."""
    from metainfer_core.normalize.inputs import load_samples, sample_feeds

    if s.data.validation is not None:
        if s.data.inputs is None:
            raise MetaInferError(f"data.validation={s.data.validation} is given without data.inputs: the validation "
                                 "samples judge plans calibrated on data.inputs' samples. Give both (the same "
                                 "arrays, keyed by the model's input names), or data.inputs alone (every third "
                                 "sample is then held out to judge accuracy).")
        fed = {i.name for i in model.graph.input}
        held, held_labels = sample_feeds(model, load_samples(s.data.validation), s.data.validation, s.data.labels_key)
        return ((feeds, labels), ([{k: v for k, v in f.items() if k in fed} for f in held], held_labels),
                "data.validation", [])
    if s.data.inputs is None:
        n = max(2, (s.verify.samples + 1) // 2)
        return ((feeds, labels), ([random_feeds(model, seed=s.seed + RANDOM_HELD_OUT_SEED + i) for i in range(n)],
                                  None), "random inputs of other seeds", [])
    cal, held = split(feeds, labels)
    if held is None:
        return cal, None, "the calibration samples", [too_few_note(len(feeds))]
    return cal, held, f"every {HOLD_OUT_EVERY}rd sample of data.inputs, held out", []


def prepare_stage(s: Settings, target_static_shapes: bool, progress: Progress = print,
                  path_failure: PathFailure | None = None) -> Prepared:
    from metainfer_core.normalize.equivalence import MAX_SAMPLES
    from metainfer_core.normalize.input_memory import check_input_memory
    from metainfer_core.normalize.inputs import fit_samples, load_samples, sample_groups
    from metainfer_core.normalize.shape_range import describe
    from metainfer_core.normalize.shapes import bind_input_shapes, unknown_negative_dims

    t0 = time.perf_counter()
    original, source = load_original(s)
    sha = hashlib.sha256(original.SerializeToString()).hexdigest()
    progress(f"normalize: {len(original.graph.node)} nodes from {source}")
    groups = sample_groups(load_samples(s.data.inputs), s.data.inputs) if s.data.inputs is not None else None
    served = served_shapes(original, s.model.shape_range, s.model.input_shapes or None, groups, target_static_shapes)
    samples = groups[served.sample_group] if groups is not None else None
    if samples is not None and target_static_shapes and served.binding:     # a bucket of another shape
        samples, fitted = fit_samples(original, samples, {k: v for k, v in served.binding.items() if None not in v})
        if fitted:
            progress(f"normalize: data.inputs' samples cropped or tiled to the bound shape: {', '.join(fitted)}")
    if served.taken_from_samples:   # dims model.input_shapes leaves symbolic take the samples' sizes
        progress(f"normalize: {'binding' if target_static_shapes else 'tuning'} "
                 + ", ".join(f"{k} to {v}" for k, v in served.taken_from_samples.items())
                 + f" (the samples' shape in data.inputs={s.data.inputs})")
    input_shapes = served.binding
    unbound = unbound_inputs(original, input_shapes) if target_static_shapes else {}
    if unbound:  # refused before normalize spends time on the model
        listed = ", ".join(f"{k!r} {v if v is not None else '(rank unknown)'}" for k, v in unbound.items())
        example = ",".join(f"{k}:[{','.join(str(d) if isinstance(d, int) else '1' for d in v)}]" if v is not None
                           else f"{k}:[<all its dims>]" for k, v in unbound.items())
        raise MetaInferError(f"Target {s.target.name} needs static shapes, but model {source} has dynamic input(s) "
                             f"{listed} that model.input_shapes does not bind. Bind each to its deployment size for "
                             f"this run, e.g. 'model.input_shapes={{{example}}}' (quoted for the shell; each 1 "
                             "stands for a symbolic dim: put the real size).")
    bound = bind_input_shapes(unknown_negative_dims(original), {**(input_shapes or {}), **served.tuned})
    check_input_memory(bound)   # before any array of that shape is drawn
    feeds, labels = None, None
    if samples is not None:     # real inputs for normalize's equivalence check and shape filling too
        feeds, labels = _validation_feeds(s, bound, samples)
    if served.general:
        progress(f"normalize: keeping {describe(served.ranges)} symbolic, tuned at "
                 + ", ".join(f"{k} {v}" for k, v in served.tuned.items())
                 + ("" if served.declared else " (no model.shape_range: verified at half and double the tuned size)"))
    result = normalize(original, input_shapes=input_shapes, seed=s.seed, feeds=feeds, tuned=served.tuned)
    for warning in result.warnings:
        progress(f"WARNING: normalize: {warning}")
    progress(f"normalize: {result.nodes_before} -> {result.nodes_after} nodes, max output error "
             f"{max(result.max_abs_err.values(), default=0.0):.2e}"
             + (f" on {min(len(feeds), MAX_SAMPLES)} sample(s) of data.inputs" if feeds else " on random inputs"))
    if feeds is None:
        feeds, labels = _validation_feeds(s, result.model)
    else:                       # the inputs normalize kept (an unused input may be gone)
        fed = {i.name for i in result.model.graph.input}
        feeds = [{k: v for k, v in f.items() if k in fed} for f in feeds]
    if s.accuracy.metric == "top1" and labels is None:
        progress("accuracy: metric top1 without labels in data.inputs: measuring top-1 agreement with fp32")
    (feeds, labels), held, judged_on, warnings = _held_out(s, result.model, feeds, labels)
    for warning in warnings:
        progress(f"WARNING: accuracy: {warning}")
    reference = run_cpu(result.model, feeds)
    held_out = (SampleSet(held[0], run_cpu(result.model, held[0]), make_loss(s.accuracy.metric, held[1]))
                if held is not None else None)
    if held_out is not None:
        progress(f"accuracy: {len(feeds)} calibration sample(s), {len(held_out.feeds)} to judge accuracy "
                 f"({judged_on}{'=' + str(s.data.validation) if s.data.validation else ''})")
    names = [o.name for o in result.model.graph.output]
    degenerate = degenerate_outputs(reference + (held_out.reference if held_out else []), names)
    if degenerate:
        progress(f"WARNING: reference outputs {degenerate} are near-constant on the validation inputs, so accuracy "
                 "figures for them mean little; give real inputs with data.inputs=<file.npz>")
    real = (held_out.feeds if held_out is not None else feeds) if s.data.inputs is not None else None
    point_sets = point_sets_of(s, result.model, served, progress, groups, real, path_failure, feeds[0])
    return Prepared(s.model.name, source, sha, result, model_feature_map(result.model), feeds, reference, degenerate,
                    make_loss(s.accuracy.metric, labels), time.perf_counter() - t0, held_out=held_out,
                    judged_on=judged_on, warnings=warnings, served=served, point_sets=point_sets)
