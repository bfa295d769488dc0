"""The shapes a run serves: which input dims normalize binds, which stay symbolic (they vary over
the shape range, declared in model.shape_range or derived from the tuned shape), the sizes the
graph is tuned at, and the points of the range every finalist is verified at."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from metainfer_core.normalize.inputs import sample_shapes
from metainfer_core.normalize.shape_range import (
    UNNAMED,
    DimRange,
    Point,
    Ranges,
    check_against_model,
    derived_ranges,
    parse_shape_range,
    points,
    to_json,
    tuned_shapes,
)
from metainfer_core.normalize.shapes import bind_input_shapes, symbolic_inputs, unknown_negative_dims


@dataclass
class ServedShapes:
    binding: dict[str, list[int | None]] | None   # what normalize binds (None: the axis stays symbolic)
    tuned: dict[str, list[int]] = field(default_factory=dict)   # the symbolic inputs' tuned sizes
    ranges: Ranges = field(default_factory=dict)                 # the inputs that vary, over what
    declared: bool = False                                       # model.shape_range gave the ranges
    points: list[Point] = field(default_factory=list)            # opt first
    taken_from_samples: dict[str, list[int]] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)             # derived points the original cannot run at
    sample_group: str = ""      # data.inputs' group at the tuned shape: the calibration and judging samples

    @property
    def general(self) -> bool:
        """The delivered graph keeps symbolic dims (it serves more than one shape)."""
        return bool(self.ranges)

    def as_dict(self) -> dict[str, Any]:
        return {"declared": self.declared, "range": to_json(self.ranges), "tuned": self.tuned,
                "points": [{"name": p.name, "shapes": p.shapes, "weight": round(p.weight, 4)} for p in self.points],
                "not_verified": self.dropped}


def served_shapes(model: onnx.ModelProto, shape_range: dict[str, list[Any]] | None,
                  input_shapes: dict[str, list[int]] | None, groups: dict[str, dict[str, np.ndarray]] | None,
                  static_target: bool) -> ServedShapes:
    """A static-shape target binds every dim (model.input_shapes, then the samples' shapes); a
    dynamic one binds only dims its range fixes and tunes the others at model.input_shapes, else
    the most frequent shape of the samples (`groups`: data.inputs' groups of one shape each,
    normalize/inputs.py), else the middle of the declared range, else 1. Axes that share a symbol
    share their range and tuned size (the first input that declares them sets both)."""
    model = unknown_negative_dims(model)
    bind_input_shapes(model, input_shapes)      # refuses an unknown input, a wrong rank, a contradicted static dim
    main = max(groups, key=lambda g: _count(groups[g])) if groups else ""
    samples = groups[main] if groups else None
    given, taken = sample_shapes(model, samples, input_shapes) if samples is not None else (input_shapes, {})
    given = dict(given or {})
    if static_target:
        return ServedShapes(given or None, taken_from_samples=taken, sample_group=main)
    declared = check_against_model(model, parse_shape_range(shape_range), input_shapes) if shape_range else {}
    observed = [{k: tuple(int(d) for d in arrays[k].shape[1:]) for k in declared if k in arrays}
                for arrays in (groups or {}).values() for _ in range(_count(arrays))] if declared else []
    dims = symbolic_inputs(model)
    tuned = {name: list(given.get(name) or [d if isinstance(d, int) else 1 for d in shape])
             for name, shape in dims.items() if not all(isinstance(d, int) for d in shape)}
    if declared:
        tuned.update(tuned_shapes(declared, {k: v for k, v in (input_shapes or {}).items() if k in declared},
                                  observed))
    ranges = {**derived_ranges(dims, tuned), **declared}
    _share_symbols(dims, ranges, tuned, list(declared))
    binding = {name: [r.low if r.fixed else None for r in rs] for name, rs in ranges.items()}
    varying = {name: rs for name, rs in ranges.items() if not all(r.fixed for r in rs)}
    tuned = {name: tuned[name] for name in varying}
    at_tuned = [g for g, arrays in (groups or {}).items()
                if all(list(arrays[k].shape[1:]) == tuned[k] for k in varying if k in arrays)]
    return ServedShapes(binding or None, tuned, varying, bool(declared), points(varying, tuned, observed),
                        taken_from_samples=taken, sample_group=at_tuned[0] if at_tuned else main)


def _count(arrays: dict[str, np.ndarray]) -> int:
    return min((len(a) for a in arrays.values() if np.ndim(a) >= 1), default=0)


def _share_symbols(dims: dict[str, list], ranges: Ranges, tuned: dict[str, list[int]], first: list[str]) -> None:
    """Give every axis named by the same symbol one range and one tuned size, in place: those of
    the first input (declared ones first) that has the symbol."""
    owner: dict[str, tuple[DimRange, int]] = {}
    for name in first + [n for n in ranges if n not in first]:
        for axis, symbol in enumerate(dims.get(name, [])):
            if not isinstance(symbol, str) or symbol in UNNAMED or name not in ranges:
                continue
            if symbol in owner:
                ranges[name][axis], tuned[name][axis] = owner[symbol]
            else:
                owner[symbol] = (ranges[name][axis], tuned[name][axis])
