"""Declared input-shape ranges (model.shape_range): per input, each dim an int, [min, max] or
[min, max, step]. model.input_shapes stays the shape a plan is tuned at; the range is every shape
the plan must serve, so it is verified at the range's representative points (min, opt, max and
the samples' shapes) and a deployed plan refuses shapes outside it."""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import onnx

from metainfer_core.errors import MetaInferError
from metainfer_core.normalize.shapes import real_inputs, show_dims


@dataclass(frozen=True)
class DimRange:
    low: int
    high: int
    step: int = 1

    @property
    def fixed(self) -> bool:
        return self.low == self.high

    def contains(self, n: int) -> bool:
        return self.low <= n <= self.high and (n - self.low) % self.step == 0

    def middle(self) -> int:
        """The in-range value on the step grid nearest (low + high) / 2, ties to the lower."""
        below = self.low + (self.high - self.low) // (2 * self.step) * self.step
        above = below + self.step
        # compare doubled distances: the middle may be a half integer
        return above if above <= self.high and 2 * above - (self.low + self.high) < (self.low + self.high) - 2 * below \
            else below

    def __str__(self) -> str:
        if self.fixed:
            return str(self.low)
        return f"[{self.low}, {self.high}]" if self.step == 1 else f"[{self.low}, {self.high}, step {self.step}]"


Ranges = dict[str, list[DimRange]]     # input name -> one DimRange per axis


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)   # True would read as 1


def parse_shape_range(raw) -> Ranges:  # type: ignore[no-untyped-def]
    """Syntax only (the settings check it before any model is loaded); ValueError names the
    input, the axis and what to write instead."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"model.shape_range={raw!r} must map each input name to its dims; write e.g. "
                         "{x: [1, [8, 128]]}")
    ranges: Ranges = {}
    for name, dims in raw.items():
        if not isinstance(dims, (list, tuple)):
            raise ValueError(f"model.shape_range.{name}={dims!r} is not a list of dims; write one entry per axis, "
                             "e.g. [1, [8, 128]]")
        ranges[str(name)] = [_parse_dim(f"model.shape_range.{name} axis {axis}", dim) for axis, dim in enumerate(dims)]
    return ranges


def _parse_dim(where: str, dim) -> DimRange:  # type: ignore[no-untyped-def]
    if _is_int(dim):
        if dim < 1:
            raise ValueError(f"{where}: {dim} is not a size; sizes start at 1, write e.g. 1")
        return DimRange(dim, dim)
    if not isinstance(dim, (list, tuple)):
        raise ValueError(f"{where}: {dim!r} is not a size; write an int, [min, max] or [min, max, step], "
                         "e.g. [8, 128]")
    shown = list(dim)
    if len(shown) not in (2, 3):
        raise ValueError(f"{where}: {shown} has {len(shown)} entries; write [min, max] or [min, max, step], "
                         "e.g. [8, 128] or [8, 128, 8]")
    if not all(_is_int(v) for v in shown):
        raise ValueError(f"{where}: {shown} holds something other than whole numbers; write e.g. [8, 128]")
    low, high, step = (*shown, 1) if len(shown) == 2 else shown
    if low < 1:
        raise ValueError(f"{where}: {shown} has min {low}; sizes start at 1, write e.g. [1, {max(high, 1)}]")
    if low > high:
        raise ValueError(f"{where}: {shown} has min {low} above max {high}; write [min, max], e.g. [{high}, {low}]")
    if step < 1:
        raise ValueError(f"{where}: {shown} has step {step}; the step is at least 1, e.g. [{low}, {high}, 1]")
    if (high - low) % step:
        fit = low + (high - low) // step * step
        raise ValueError(f"{where}: {shown} has max - min = {high - low}, not a multiple of the step {step}; "
                         f"make it one, e.g. [{low}, {fit}, {step}]")
    return DimRange(low, high, step if low < high else 1)   # a fixed dim has no step: equal ranges compare equal


# dim_params that name no symbol: exporters write "?" for "unknown" on every such dim (Paddle2ONNX)
UNNAMED = frozenset({"", "?"})


def check_against_model(model: onnx.ModelProto, ranges: Ranges,
                        input_shapes: dict[str, list[int]] | None) -> Ranges:
    """The ranges against the model's declared inputs and model.input_shapes; MetaInferError
    for the first that cannot be served. Dims the model declares with no size (no value, a
    symbol, or a size <= 0 from an old exporter) take any range."""
    inputs = {i.name: i for i in real_inputs(model)}
    symbols: dict[str, tuple[str, int, DimRange]] = {}    # dim_param -> the first ranged input using it
    for name, dims in ranges.items():
        if name not in inputs:
            raise MetaInferError(
                f"model.shape_range names input '{name}', but the inputs the model is fed are {sorted(inputs)}; "
                "use one of those names.")
        tensor_type = inputs[name].type.tensor_type
        declared = tensor_type.shape.dim if tensor_type.HasField("shape") else None
        if declared is not None and len(declared) != len(dims):
            raise MetaInferError(
                f"model.shape_range gives input '{name}' rank {len(dims)} ({_show(dims)}), but the model declares "
                f"rank {len(declared)} ({show_dims(declared)}); give exactly {len(declared)} dims.")
        for axis, (dim, r) in enumerate(zip(declared or [], dims)):
            if dim.HasField("dim_value") and dim.dim_value > 0 and (r.low, r.high) != (dim.dim_value,) * 2:
                raise MetaInferError(
                    f"model.shape_range gives input '{name}' {r} on axis {axis}, but the model fixes that axis to "
                    f"{dim.dim_value} ({show_dims(declared)}); write {dim.dim_value} there: only dims the model "
                    "leaves dynamic can vary.")
            if dim.HasField("dim_param") and dim.dim_param not in UNNAMED:
                first = symbols.setdefault(dim.dim_param, (name, axis, r))
                if first[2] != r:
                    raise MetaInferError(
                        f"model.shape_range gives input '{first[0]}' {first[2]} on axis {first[1]} but input "
                        f"'{name}' {r} on axis {axis}; the model names both dims '{dim.dim_param}', so they always "
                        "have the same size: give both the same range.")
        given = (input_shapes or {}).get(name)
        if given is None:
            continue
        if len(given) != len(dims):
            raise MetaInferError(
                f"model.input_shapes gives input '{name}' rank {len(given)} ({list(given)}), but model.shape_range "
                f"gives it rank {len(dims)} ({_show(dims)}); give both the model's rank.")
        for axis, (size, r) in enumerate(zip(given, dims)):
            if size is not None and not r.contains(size):
                raise MetaInferError(
                    f"model.input_shapes gives input '{name}' size {size} on axis {axis}, outside its "
                    f"model.shape_range {r}; the tuned shape must lie in the range: change one of the two.")
    return ranges


def tuned_shapes(ranges: Ranges, input_shapes: dict[str, list[int]] | None,
                 sample_shapes: list[dict[str, tuple[int, ...]]] = (),  # type: ignore[assignment]
                 ) -> dict[str, list[int]]:
    """Each ranged input's tuned shape: model.input_shapes', else the samples' most frequent
    in-range shape (ties: the first seen), else the middle of each dim."""
    tuned: dict[str, list[int]] = {}
    for name, dims in ranges.items():
        if (input_shapes or {}).get(name) is not None:
            tuned[name] = list(input_shapes[name])  # type: ignore[index]
            continue
        seen = Counter(tuple(s[name]) for s in sample_shapes if name in s and _inside(dims, s[name]))
        tuned[name] = list(seen.most_common(1)[0][0]) if seen else [r.middle() for r in dims]
    return tuned


def derived_ranges(symbolic: dict[str, list[int | str]], tuned: dict[str, list[int]]) -> Ranges:
    """No declared range: half to double the tuned size on each dynamic axis (a size the inputs
    of a sequence or image model plausibly take), static axes fixed. A dynamic input `tuned`
    lacks counts as tuned at 1."""
    ranges: Ranges = {}
    for name, dims in symbolic.items():
        if all(_static(d) for d in dims):
            continue
        sizes = tuned.get(name) or [1] * len(dims)
        ranges[name] = [DimRange(d, d) if _static(d) else DimRange(max(1, t // 2), 2 * t)
                        for d, t in zip(dims, sizes)]
    return ranges


def _static(d: int | str) -> bool:
    return _is_int(d) and d > 0     # type: ignore[operator]


@dataclass(frozen=True)
class Point:
    name: str                          # "min", "opt", "max", or "data k" for a sample shape
    shapes: dict[str, list[int]]       # every ranged input's shape at this point
    weight: float                      # share of the verdict, all points sum to 1

    def where(self) -> str:
        """"x [1, 8], mask [1, 8]": the point's shapes, for messages."""
        return ", ".join(f"{name} {shape}" for name, shape in self.shapes.items())


FLOOR = 0.25        # with samples: the share min, max (and opt) keep when no sample has their shape


def points(ranges: Ranges, tuned: dict[str, list[int]],
           sample_shapes: list[dict[str, tuple[int, ...]]] = ()) -> list[Point]:  # type: ignore[assignment]
    """opt, min, max and each distinct in-range sample shape, equal points merged. Weighted by
    the samples at each shape (points no sample has share a 25 % floor, so the range's ends
    always count); without samples opt 0.5, the others equal shares of 0.5."""
    opt = {n: list(tuned[n]) if n in tuned else [r.middle() for r in rs] for n, rs in ranges.items()}
    named = [("opt", opt), ("min", {n: [r.low for r in rs] for n, rs in ranges.items()}),
             ("max", {n: [r.high for r in rs] for n, rs in ranges.items()})]
    # a sample lacking a ranged input is taken at that input's tuned shape
    data = [{n: list(s.get(n, opt[n])) for n in ranges} for s in sample_shapes
            if any(n in s for n in ranges) and all(n not in s or _inside(rs, s[n]) for n, rs in ranges.items())]
    names: list[str] = []
    shapes: list[dict[str, list[int]]] = []
    nominal: list[float] = []
    for k, (name, shape) in enumerate(named + [("data", s) for s in data]):
        weight = 0.5 if k == 0 else 0.25 if k < 3 else 0.0     # the weights without samples
        if shape in shapes:
            nominal[shapes.index(shape)] += weight
            continue
        names.append(name if k < 3 else f"data {sum(n.startswith('data') for n in names) + 1}")
        shapes.append(shape)
        nominal.append(weight)
    if not data:
        return [Point(n, s, w) for n, s, w in zip(names, shapes, nominal)]
    counts = [sum(d == s for d in data) for s in shapes]
    unseen = counts.count(0)
    share = 1.0 - FLOOR if unseen else 1.0
    return [Point(n, s, share * c / len(data) if c else FLOOR / unseen) for n, s, c in zip(names, shapes, counts)]


def outside(ranges: Ranges, shapes: dict[str, tuple[int, ...]]) -> str | None:
    """Why `shapes` is not servable by a plan verified over `ranges` (None when it is); inputs
    without a range are not checked."""
    for name, dims in ranges.items():
        if name not in shapes:
            continue
        shape = [int(d) for d in shapes[name]]
        if len(shape) != len(dims):
            return (f"Input '{name}' has shape {shape} (rank {len(shape)}), but the plan's shape range gives it rank "
                    f"{len(dims)} ({_show(dims)}); give the input in that rank.")
        for axis, (size, r) in enumerate(zip(shape, dims)):
            if not r.contains(size):
                return (f"Input '{name}' has size {size} on axis {axis} (shape {shape}), outside the plan's shape "
                        f"range {r} there ({name} {_show(dims)}); the plan was verified only inside it: pad the input "
                        f"into the range, or re-adapt the model with a wider model.shape_range that covers {size}.")
    return None


def _inside(dims: list[DimRange], shape) -> bool:  # type: ignore[no-untyped-def]
    return len(shape) == len(dims) and all(r.contains(int(n)) for r, n in zip(dims, shape))


def to_json(ranges: Ranges) -> dict[str, list]:  # type: ignore[type-arg]
    return {name: [r.low if r.fixed else [r.low, r.high] if r.step == 1 else [r.low, r.high, r.step] for r in dims]
            for name, dims in ranges.items()}


def from_json(raw) -> Ranges:  # type: ignore[no-untyped-def]
    return parse_shape_range(raw)


def describe(ranges: Ranges) -> str:
    """'x [1, 8..128], mask [1, 8..128]' for logs."""
    return ", ".join(f"{name} {_show(dims)}" for name, dims in ranges.items())


def _show(dims: list[DimRange]) -> str:
    parts = [str(r.low) if r.fixed else f"{r.low}..{r.high}" + (f" step {r.step}" if r.step > 1 else "")
             for r in dims]
    return "[" + ", ".join(parts) + "]"
