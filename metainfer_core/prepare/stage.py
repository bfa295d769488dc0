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
from metainfer_core.accuracy.metric import LossFn, degenerate_outputs, make_loss, plan_loss, run_cpu
from metainfer_core.errors import MetaInferError
from metainfer_core.ir.features import model_feature_map
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.normalize import NormalizeResult, load_model, normalize, unbound_inputs
from metainfer_core.settings import Settings

Progress = Callable[[str], None]


@dataclass
class Prepared:
    name: str
    source: str
    sha256: str
    normalized: NormalizeResult
    feature_map: dict
    feeds: list[dict[str, np.ndarray]]
    reference: list[list[np.ndarray]]
    degenerate: list[str]          # outputs whose reference is near-constant on these inputs
    loss_fn: LossFn = plan_loss     # accuracy.metric, bound to the validation labels if any
    seconds: float = 0.0
    # what rewrites compute once per run (int8 calibration ranges: seconds of model runs on a large
    # model), shared by the profile's variants, the search and the accuracy guard
    action_cache: dict = field(default_factory=dict, repr=False)

    @property
    def model(self) -> onnx.ModelProto:
        return self.normalized.model


def _load(s: Settings) -> tuple[onnx.ModelProto, str]:
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


def prepare_stage(s: Settings, target_static_shapes: bool, progress: Progress = print) -> Prepared:
    from metainfer_core.normalize.equivalence import MAX_SAMPLES
    from metainfer_core.normalize.input_memory import check_input_memory
    from metainfer_core.normalize.inputs import load_samples, sample_shapes
    from metainfer_core.normalize.shapes import bind_input_shapes, unknown_negative_dims

    t0 = time.perf_counter()
    original, source = _load(s)
    sha = hashlib.sha256(original.SerializeToString()).hexdigest()
    progress(f"normalize: {len(original.graph.node)} nodes from {source}")
    input_shapes = s.model.input_shapes or None
    samples = load_samples(s.data.inputs) if s.data.inputs is not None else None
    if samples is not None:     # dims model.input_shapes leaves symbolic take the samples' sizes
        input_shapes, taken = sample_shapes(original, samples, input_shapes)
        if taken:
            progress("normalize: binding " + ", ".join(f"{k} to {v}" for k, v in taken.items())
                     + f" (the samples' shape in data.inputs={s.data.inputs})")
    unbound = unbound_inputs(original, input_shapes) if target_static_shapes else {}
    if unbound:  # refused before normalize spends time on the model
        listed = ", ".join(f"{k!r} {v if v is not None else '(rank unknown)'}" for k, v in unbound.items())
        example = ",".join(f"{k}:[{','.join(str(d) if isinstance(d, int) else '1' for d in v)}]" if v is not None
                           else f"{k}:[<all its dims>]" for k, v in unbound.items())
        raise MetaInferError(f"Target {s.target.name} needs static shapes, but model {source} has dynamic input(s) "
                             f"{listed} that model.input_shapes does not bind. Bind each to its deployment size for "
                             f"this run, e.g. 'model.input_shapes={{{example}}}' (quoted for the shell; each 1 "
                             "stands for a symbolic dim: put the real size).")
    bound = bind_input_shapes(unknown_negative_dims(original), input_shapes)
    check_input_memory(bound)   # before any array of that shape is drawn
    feeds, labels = None, None
    if samples is not None:     # real inputs for normalize's equivalence check and shape filling too
        feeds, labels = _validation_feeds(s, bound, samples)
    result = normalize(original, input_shapes=input_shapes, seed=s.seed, feeds=feeds)
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
    reference = run_cpu(result.model, feeds)
    names = [o.name for o in result.model.graph.output]
    degenerate = degenerate_outputs(reference, names)
    if degenerate:
        progress(f"WARNING: reference outputs {degenerate} are near-constant on the validation inputs, so accuracy "
                 "figures for them mean little; give real inputs with data.inputs=<file.npz>")
    return Prepared(s.model.name, source, sha, result, model_feature_map(result.model), feeds, reference, degenerate,
                    make_loss(s.accuracy.metric, labels), time.perf_counter() - t0)
