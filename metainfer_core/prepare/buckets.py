"""Static-shape targets serve a shape range as buckets, as serving stacks for such devices do: a
few static shapes (the range's min, tuned and max), each adapted as a plan of its own; an input
is padded up to the smallest bucket that holds it and the outputs cropped back.

Padding is allowed only along an axis where it provably changes nothing but the padded rows:
measured on the original model (ONNX Runtime, dynamic shapes), the outputs of a zero-padded
input, cropped, equal those of the unpadded one, and each output axis that grew grew exactly
as the input axis did (a batch axis does; a sequence axis read by attention without a mask,
or an image axis a convolution mixes, does not). Along any other axis a shape must equal a
bucket's size."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from metainfer_core.accuracy.metric import run_cpu
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.normalize.shape_range import Ranges, check_against_model, parse_shape_range, tuned_shapes
from metainfer_core.normalize.shapes import unknown_negative_dims

Shapes = dict[str, list[int]]
PAD_RTOL, PAD_ATOL = 1e-4, 1e-5     # padded-then-cropped outputs against unpadded ones


@dataclass
class BucketLayout:
    ranges: Ranges
    buckets: list[Shapes]                               # smallest first
    axes: dict[str, list[int]]                          # input -> the axes padding may grow
    follows: dict[str, dict[str, dict[str, int]]]       # input -> axis -> {output: its axis that follows}


def bucket_layout(model: onnx.ModelProto, shape_range: dict[str, list[Any]],
                  input_shapes: dict[str, list[int]] | None, seed: int = 0) -> BucketLayout:
    """The buckets a static-shape target adapts `model` at over the declared range, and where
    padding may reach them (measured on `model`, the original)."""
    model = unknown_negative_dims(model)
    ranges = check_against_model(model, parse_shape_range(shape_range), input_shapes)
    tuned = tuned_shapes(ranges, {k: v for k, v in (input_shapes or {}).items() if k in ranges})
    axes, follows = paddable_axes(model, ranges, seed)
    return BucketLayout(ranges, choose_buckets(ranges, tuned), axes, follows)


def choose_buckets(ranges: Ranges, tuned: Shapes) -> list[Shapes]:
    """The range's min, tuned and max shapes (duplicates dropped), smallest first; the max bucket
    holds every shape of the range."""
    shapes = [{k: [r.low for r in dims] for k, dims in ranges.items()}, {k: list(tuned[k]) for k in ranges},
              {k: [r.high for r in dims] for k, dims in ranges.items()}]
    out: list[Shapes] = []
    for s in shapes:
        if s not in out:
            out.append(s)
    return sorted(out, key=lambda s: sum(int(np.prod(v)) for v in s.values()))


def paddable_axes(model: onnx.ModelProto, ranges: Ranges, seed: int = 0
                  ) -> tuple[dict[str, list[int]], dict[str, dict[str, dict[str, int]]]]:
    """({input: the axes padding may grow}, {input: {axis: {output: the output axis that follows it}}})
    measured on `model` (the original, symbolic dims kept): each varying axis in turn, at its
    low size and padded to its high size, every other axis at its low size."""
    low = {k: [r.low for r in dims] for k, dims in ranges.items()}
    outputs = [o.name for o in model.graph.output]
    axes: dict[str, list[int]] = {}
    follows: dict[str, dict[str, dict[str, int]]] = {}
    for name, dims in ranges.items():
        for axis, r in enumerate(dims):
            if r.fixed:
                continue
            big = {k: list(v) for k, v in low.items()}
            big[name][axis] = r.high
            found = _pad_follows(model, low, big, name, axis, outputs, seed)
            if found is not None:
                axes.setdefault(name, []).append(axis)
                follows.setdefault(name, {})[str(axis)] = found
    return axes, follows


def _pad_follows(model: onnx.ModelProto, small: Shapes, big: Shapes, name: str, axis: int, outputs: list[str],
                 seed: int) -> dict[str, int] | None:
    """{output: its axis that grew with input `name`'s `axis`} when padding that axis changes
    nothing else, else None."""
    try:
        feed = random_feeds(model, seed, shapes=small)
        padded = dict(feed, **{name: pad_to(feed[name], big[name])})
        want, got = run_cpu(model, [feed])[0], run_cpu(model, [padded])[0]
    except Exception:  # noqa: BLE001 - a model that cannot run padded is not padded
        return None
    grow = big[name][axis] - small[name][axis]
    follows = {}
    for out, w, g in zip(outputs, want, got):
        grew = [a for a in range(w.ndim) if g.shape[a] != w.shape[a]] if g.ndim == w.ndim else None
        if grew is None or len(grew) > 1 or (grew and g.shape[grew[0]] - w.shape[grew[0]] != grow):
            return None
        if grew:
            follows[out] = grew[0]
        cropped = g[tuple(slice(0, n) for n in w.shape)]
        if not np.allclose(cropped, w, rtol=PAD_RTOL, atol=PAD_ATOL, equal_nan=True):
            return None
    return follows


def pad_to(x: np.ndarray, shape: list[int]) -> np.ndarray:
    """`x` zero-padded at the end of each axis up to `shape`."""
    return np.pad(x, [(0, int(t) - n) for n, t in zip(x.shape, shape)])
