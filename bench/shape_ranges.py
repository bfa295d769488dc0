"""Shape ranges over the corpus (model.shape_range): every corpus model with a symbolic input dim
adapted on `cpu` over a declared range, then its delivered plan checked across that range and
timed beside the peers at the range's ends and its tuned shape.

Per model:

1. The declared range (build_range): a batch-like dim (axis 0, size 1 in the corpus shape) [1, 8];
   any other symbolic dim [t // 2, 2 t] around its corpus size t, on a step of STEP where the
   model needs one (the spatial dims of the corpus's detector and segmentation models, whose
   images are multiples of 32), the step grid passing through t. Dims that share a symbol share
   the range (silero_vad's `state [2, batch, 128]` takes the batch range of `input [batch, ...]`),
   as do the exporter-named dims (`unk__N`, unnamed) at the same axis of inputs with the same
   corpus shape (deepcut's input_1 / input_2). Static dims are ints; inputs with no symbolic dim
   (silero_vad's scalar `sr`) are not declared. Where the ORIGINAL model (ONNX Runtime) cannot run
   at an end of a dim's range (others at the corpus shape), that end is pulled towards t (bisected
   on the step grid to the furthest size it runs at), and where it then fails at one of the check's
   random sizes the dim is fixed at t (narrow); the row says so.
2. flows/adapt.py target=cpu with the defaults (bench/adapt_run.py adapt, as bench/adapt_corpus.py
   runs it, via bench/modelset.py's corpus entries): data.inputs = the model's real inputs (the
   corpus's .npz of make_inputs(model, 12, 0)), model.input_shapes = the corpus shape, and the
   declared model.shape_range, each one argv item (input names escaped for Hydra's grammar).
3. check_run on the run folder: the delivered model.onnx keeps a symbolic dim wherever the range
   varies one; the plan (metainfer_core.plan.deployable.load_plan) runs at the range's min and max
   and at 5 seeded random points inside it, each scored with plan_loss against the ORIGINAL model
   on ONNX Runtime at the same inputs (the real samples cropped or tiled to the point's shape, as
   verify does: feeds_at; inputs the range does not vary take their real sample, e.g. sr = 16000),
   within plan.json's accuracy_bound; and it refuses a shape one step above the range's max with a
   MetaInferError. A point the original itself cannot run at is reported as such, not as the plan's.
4. Unless --no-peers: at min, opt (the tuned shape) and max, the peers of bench/peers.py and the
   plan timed side by side (bench/ort_baselines.py compare, against the run's default.onnx, on
   SAMPLES real inputs fitted to that point), and meta-infer against the fastest peer within the
   accuracy bound (bench/report.py compare_ratios); geo-means per point over the models at the end.

    python -m bench.shape_ranges [--only key,key] [--timeout S per adapt] [--no-peers] [--rounds N]
                                 [--artifacts DIR] [--json PATH] [extra hydra overrides]

A model whose adapt fails (or times out) is a row with its error paragraph, not a crash.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from bench import corpus, goals, modelset, ort_baselines, report
from bench.adapt_run import adapt
from bench.peers import short
from metainfer_core.accuracy.metric import plan_loss
from metainfer_core.errors import MetaInferError
from metainfer_core.ir.runs import cpu_session
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.normalize.inputs import fit_to_shape
from metainfer_core.normalize.shape_range import DimRange, Ranges, describe, from_json, to_json
from metainfer_core.normalize.shapes import symbolic_inputs, unknown_negative_dims

BATCH = (1, 8)          # a batch-like dim's range
STEP = 32               # the step of a detector's / segmenter's image dims
STEPPED_FAMILIES = ("detector", "segmentation")
RANDOM_POINTS = 5       # seeded random points inside the range, beside min and max
SAMPLES = 4             # random inputs per point the peers calibrate and are scored on
ROUNDS = 30             # interleaved timed rounds per peer and point
PEER_POINTS = ("min", "opt", "max")
_GENERATED = re.compile(r"^(unk__\d+|\?)$")     # exporter-made names: no meaning shared across inputs

Dim = tuple[str, int]   # (input, axis)


# --- the declared range -----------------------------------------------------------------------

def dim_groups(symbolic: dict[str, list], shapes: dict[str, list]) -> list[list[Dim]]:
    """The dynamic dims (str entries of symbolic_inputs) grouped by the size they always share:
    one group per symbol; exporter-made names (unk__N, '?') at the same axis of inputs whose
    `shapes` entries are equal form one group too; in input order."""
    groups: dict[Any, list[Dim]] = {}
    for name, dims in symbolic.items():
        for axis, d in enumerate(dims):
            if not isinstance(d, str):
                continue
            key = ("generated", axis, repr(shapes.get(name)), len(dims)) if _GENERATED.match(d) else ("symbol", d)
            groups.setdefault(key, []).append((name, axis))
    return list(groups.values())


def _around(t: int, step: int) -> DimRange:
    """[t // 2, 2 t] on the step grid through t (ends pulled inside)."""
    low = t - (t - max(1, t // 2)) // step * step
    return DimRange(low, t + t // step * step, step if t // step else 1)


def build_range(symbolic: dict[str, list], shapes: dict[str, list[int]],
                step_of=lambda name, axis: 1) -> Ranges:
    """The declared range of a model whose fed inputs have `symbolic` dims (symbolic_inputs:
    int static, str symbolic), around its deployment `shapes`: per group of dim_groups, [1, 8]
    when batch-like (a member on axis 0 with size 1), else [t // 2, 2 t] on step_of(input, axis)
    of the group's first member; static dims fixed; inputs with no symbolic dim left out."""
    ranges: Ranges = {name: [DimRange(int(d), int(d)) if not isinstance(d, str) else None for d in dims]
                      for name, dims in symbolic.items() if any(isinstance(d, str) for d in dims)}
    for group in dim_groups(symbolic, shapes):
        name, axis = group[0]
        if name not in shapes:
            raise ValueError(f"input '{name}' has a symbolic dim on axis {axis} but no deployment shape")
        if any(a == 0 and shapes[n][0] == 1 for n, a in group):
            r = DimRange(*BATCH)
        else:
            r = _around(int(shapes[name][axis]), max(1, int(step_of(name, axis))))
        for n, a in group:
            ranges[n][a] = r
    return ranges


def corpus_step(model: corpus.CorpusModel):
    """step_of for a corpus model: STEP on the spatial dims (axes 2, 3 of a rank-4 NCHW image) of
    its detector and segmentation models, else 1."""
    def step_of(name: str, axis: int) -> int:
        shape = model.input_shapes.get(name) or []
        return STEP if model.family in STEPPED_FAMILIES and len(shape) == 4 and axis in (2, 3) else 1
    return step_of


def _hydra_key(name: str) -> str:
    return re.sub(r"([()\[\]{}:=, \t\\])", r"\\\1", name)


def range_override(ranges: Ranges) -> str:
    """`model.shape_range={...}` as one argv item (Hydra's grammar; special characters in input
    names escaped)."""
    body = ",".join(f"{_hydra_key(name)}:{json.dumps(dims, separators=(',', ':'))}"
                    for name, dims in to_json(ranges).items())
    return f"model.shape_range={{{body}}}"


# --- points and feeds -------------------------------------------------------------------------

def _varying(ranges: Ranges, groups: list[list[Dim]]) -> list[tuple[int, list[Dim]]]:
    """(index in `groups`, its dims the range varies) of each group the range varies."""
    out = [(k, [(n, a) for n, a in g if n in ranges and not ranges[n][a].fixed]) for k, g in enumerate(groups)]
    return [(k, g) for k, g in out if g]


def _grid(r: DimRange, rng: np.random.Generator, n: int) -> list[int]:
    return [int(r.low + r.step * k) for k in rng.integers(0, (r.high - r.low) // r.step + 1, size=n)]


def check_points(ranges: Ranges, groups: list[list[Dim]], seed: int = 0, n: int = RANDOM_POINTS
                 ) -> list[tuple[str, dict[str, list[int]]]]:
    """(name, shapes): min, max, then `n` seeded random points inside the range, each group of
    dims at one size (drawn on its grid, one generator per group: narrowing one group leaves the
    others' draws as they were)."""
    lows = {name: [r.low for r in dims] for name, dims in ranges.items()}
    out = [("min", lows), ("max", {name: [r.high for r in dims] for name, dims in ranges.items()})]
    varying = [g for _, g in _varying(ranges, groups)]
    draws = [_grid(ranges[g[0][0]][g[0][1]], np.random.default_rng([seed, k]), n) for k, g in _varying(ranges, groups)]
    for i in range(n):
        shapes = {name: list(dims) for name, dims in lows.items()}
        for g, values in zip(varying, draws):
            for name, axis in g:
                shapes[name][axis] = values[i]
        out.append((f"random {i + 1}", shapes))
    return out


def feeds_at(original: onnx.ModelProto, shapes: dict[str, list[int]], seed: int,
             real: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Inputs of the original model at `shapes`: from the real samples (`real`: input -> its
    samples, first axis the sample; sample `seed` mod their number), cropped or tiled to the
    shape as verify does (normalize/inputs.py fit_to_shape), so that values stay in the range
    the plan was calibrated on; seeded random inputs (random_feeds) for an input without samples.
    An input no range varies takes its sample as it is."""
    feeds = random_feeds(original, seed, shapes={k: list(v) for k, v in shapes.items()})
    for k, arrays in (real or {}).items():
        sample = np.asarray(arrays[seed % len(arrays)])
        feeds[k] = fit_to_shape(sample, list(shapes[k])).astype(feeds[k].dtype) if k in shapes and k in feeds \
            else sample
    return feeds


def _runs(session, feeds) -> str | None:
    try:
        session.run(None, feeds)
        return None
    except Exception as exc:  # noqa: BLE001 - the original cannot run here: the caller narrows
        return short(exc, 120)


SPAN = 4       # the smallest span max / min of a declared dim (issue: "at least a 4x span")


def _widened_low(ends: dict[str, int], step: int) -> int:
    """The low end that gives the high one a SPAN x span, on the step grid through the low end."""
    if ends["high"] >= SPAN * ends["low"]:
        return ends["low"]
    want = max(1, -(-ends["high"] // SPAN))
    return max(1, ends["low"] - (ends["low"] - want + step - 1) // step * step)


def narrow(original: onnx.ModelProto, ranges: Ranges, groups: list[list[Dim]], opt: dict[str, list[int]],
           fixed: dict[str, np.ndarray] | None = None, seed: int = 0) -> tuple[Ranges, list[str]]:
    """`ranges` narrowed to where the original model runs on ONNX Runtime, one group of dims at a
    time (the others at `opt`): an end it fails at is bisected towards the opt size to the
    furthest size it runs at, and a group it then fails at one of check_points' random sizes is
    fixed at the opt size. Returns (ranges, one note per change)."""
    session = cpu_session(original)
    ranges = {name: list(dims) for name, dims in ranges.items()}
    notes: list[str] = []

    def fails(g: list[Dim], size: int) -> str | None:
        shapes = {name: list(dims) for name, dims in opt.items() if name in ranges}
        for name, axis in g:
            shapes[name][axis] = size
        return _runs(session, feeds_at(original, shapes, seed, fixed))

    for k, g in _varying(ranges, groups):
        name, axis = g[0]
        r, t = ranges[name][axis], opt[name][axis]
        where = f"{name} axis {axis}" + (f" (with {', '.join(f'{n} axis {a}' for n, a in g[1:])})" if g[1:] else "")
        ends = {"low": r.low, "high": r.high}
        for side, end in list(ends.items()):
            why = fails(g, end)
            if why is None:
                continue
            good, bad = t, end          # bisect on the grid: the original runs at t (the corpus shape)
            while abs(bad - good) > r.step:
                mid = good + (bad - good) // (2 * r.step) * r.step
                if fails(g, mid) is None:
                    good = mid
                else:
                    bad = mid
            ends[side] = good
            notes.append(f"{where}: the original model fails at {end} ({why}); {side} end narrowed to {good}")
        low = _widened_low(ends, r.step)     # a narrowed high end: the low end moves down to keep a 4x span
        if low < ends["low"] and fails(g, low) is None:
            notes.append(f"{where}: low end moved from {ends['low']} to {low} to keep a {SPAN}x span")
            ends["low"] = low
        r2 = DimRange(ends["low"], ends["high"], r.step if ends["low"] < ends["high"] else 1)
        draws = _grid(r2, np.random.default_rng([seed, k]), RANDOM_POINTS) if not r2.fixed else []
        broken = next(((v, why) for v in draws if (why := fails(g, v)) is not None), None)
        if broken is not None:
            r2 = DimRange(t, t)
            notes.append(f"{where}: the original model fails at {broken[0]} inside the range ({broken[1]}); "
                         f"fixed at {t}")
        for n, a in g:
            ranges[n][a] = r2
    return ranges, notes


# --- the check of a run folder ----------------------------------------------------------------

def _kept(model_file: Path, ranges: Ranges) -> list[str]:
    """The declared varying dims the delivered model.onnx fixes (empty: every one kept symbolic)."""
    dims = symbolic_inputs(onnx.load(str(model_file), load_external_data=False))
    return [f"{name} axis {axis} fixed to {dims.get(name, [])[axis]}"
            for name, rs in ranges.items() for axis, r in enumerate(rs)
            if not r.fixed and not isinstance((dims.get(name) or [None] * (axis + 1))[axis], str)]


def check_run(folder: str | Path, original: onnx.ModelProto, ranges: Ranges, seed: int = 0,
              fixed: dict[str, np.ndarray] | None = None, groups: list[list[Dim]] | None = None) -> dict:
    """The delivered plan of run `folder` across the declared `ranges`: {symbols_kept, fixed_dims,
    bound, points: [{name, shapes, ok, loss, error}] (min, max, RANDOM_POINTS random), n_ok,
    n_points, worst_loss, refused_outside, refused (the shape tried and what load_plan said),
    plan_points (plan.json's shapes.points: name, shapes, speed-up, loss), decision}. `groups`:
    dims that share a size (default: dim_groups of the original's inputs)."""
    from metainfer_core.plan.deployable import load_plan

    folder = Path(folder)
    plan_json = json.loads((folder / "plan.json").read_text())
    bound = plan_json.get("accuracy_bound")
    if groups is None:
        groups = dim_groups(symbolic_inputs(unknown_negative_dims(original)), ranges)
    out: dict[str, Any] = {"decision": plan_json.get("decision"), "bound": bound}
    out["fixed_dims"] = _kept(folder / "model.onnx", ranges)
    out["symbols_kept"] = not out["fixed_dims"]
    plan = load_plan(folder)
    session = cpu_session(original)
    rows = []
    for k, (name, shapes) in enumerate(check_points(ranges, groups, seed)):
        feeds = feeds_at(original, shapes, seed + k, fixed)
        row = {"name": name, "shapes": shapes, "ok": False, "loss": None, "error": None}
        try:
            reference = session.run(None, feeds)
        except Exception as exc:  # noqa: BLE001 - not the plan's failure: said apart
            rows.append(row | {"error": f"the original model fails here: {short(exc, 120)}", "original_fails": True})
            continue
        try:
            row["loss"] = float(plan_loss([reference], [plan.run(feeds)]))
            row["ok"] = bound is None or row["loss"] <= bound
            if not row["ok"]:
                row["error"] = f"loss {row['loss']:.3g} above the bound {bound:g}"
        except Exception as exc:  # noqa: BLE001 - a plan that does not run at a point is this row's finding
            row["error"] = f"the plan fails: {short(exc, 200)}"
        rows.append(row)
    out["points"], out["n_points"] = rows, len(rows)
    out["n_ok"] = sum(r["ok"] for r in rows)
    losses = [r["loss"] for r in rows if r["loss"] is not None]
    out["worst_loss"] = max(losses) if losses else None
    out |= _refusal(plan, original, ranges, groups, seed, fixed)
    out["plan_points"] = _plan_points(plan_json, ranges)
    return out


def _plan_points(plan_json: dict, ranges: Ranges) -> list[dict]:
    """plan.json's shapes.points: {name, shapes, speedup (default / plan), accuracy_loss, also: the
    range ends it is at (a point equal to opt is merged into opt)}."""
    ends = {"min": {n: [r.low for r in rs] for n, rs in ranges.items()},
            "max": {n: [r.high for r in rs] for n, rs in ranges.items()}}
    out = []
    for p in (plan_json.get("shapes") or {}).get("points") or []:
        shapes = p.get("shapes") or {}
        also = [e for e, s in ends.items()
                if e != p["name"] and shapes and all(s.get(k) == v for k, v in shapes.items())]
        out.append({"name": p["name"], "shapes": shapes, "accuracy_loss": p.get("accuracy_loss"), "also": also,
                    "speedup": p["default_ms"] / p["plan_ms"] if p.get("default_ms") and p.get("plan_ms") else None})
    return out


def _refusal(plan, original, ranges: Ranges, groups: list[list[Dim]], seed: int, fixed) -> dict:
    """load_plan's answer to a shape one step above the max of the first dim the range varies
    (its whole group moved with it), the other dims at their min."""
    varying = _varying(ranges, groups)
    if not varying:
        return {"refused_outside": None, "refused": "no dim varies"}
    shapes = {name: [r.low for r in dims] for name, dims in ranges.items()}
    first = varying[0][1]
    r = ranges[first[0][0]][first[0][1]]
    for name, axis in first:
        shapes[name][axis] = r.high + r.step
    feeds = feeds_at(original, shapes, seed, fixed)
    try:
        plan.run(feeds)
    except MetaInferError as exc:
        return {"refused_outside": True, "refused": f"{shapes}: {str(exc).splitlines()[0]}"}
    except Exception as exc:  # noqa: BLE001 - failed, but not as a refusal
        return {"refused_outside": False, "refused": f"{shapes}: not refused but failed: {short(exc)}"}
    return {"refused_outside": False, "refused": f"{shapes}: ran"}


# --- the peers at a point ---------------------------------------------------------------------

def peers_at(folder: Path, original: onnx.ModelProto, shapes: dict[str, list[int]], seed: int, rounds: int,
             bound: float, fixed: dict[str, np.ndarray] | None = None) -> dict:
    """The peers of the run's default.onnx and its plan timed side by side at `shapes`
    (ort_baselines.compare on SAMPLES real inputs fitted to that point): {shapes, compare, fastest (label),
    fastest_ms, meta_ms, vs_fastest (fastest peer's latency / meta-infer's, > 1 = meta-infer
    faster)}, or {shapes, error}."""
    feeds = [feeds_at(original, shapes, seed + i, fixed) for i in range(SAMPLES)]
    try:
        c = ort_baselines.compare(onnx.load(str(folder / "default.onnx")), run_folder=folder, feeds=feeds,
                                  runs=rounds, max_loss=bound)
    except Exception as exc:  # noqa: BLE001 - a comparison that breaks is this point's finding
        return {"shapes": shapes, "error": f"peers: {short(exc)}"}
    best = goals.fastest_peer(c, bound)
    mine = c.get("meta_infer") or {}
    return {"shapes": shapes, "compare": c, "fastest": best and best[0], "fastest_ms": best and best[1],
            "meta_ms": mine.get("latency_ms"), "meta_loss": mine.get("accuracy_loss"),
            "meta_over": mine.get("accuracy_loss") is not None and mine["accuracy_loss"] > bound,
            "vs_fastest": goals.compare_ratios({"compare": c}, bound)["vs_fastest"]}


# --- one model --------------------------------------------------------------------------------

def _real_samples(npz: Path | None, names) -> dict[str, np.ndarray]:
    if npz is None:
        return {}
    with np.load(npz) as data:
        return {k: np.asarray(data[k]) for k in names if k in data.files}


def bench_one(entry: modelset.Entry, overrides: list[str], timeout: float | None, peers: bool, rounds: int,
              seed: int = 0, say=lambda msg: None) -> dict:
    """One corpus model: range, narrowing, adapt, check, peers; the row (see main)."""
    t0 = time.perf_counter()
    row: dict[str, Any] = {"name": entry.key}
    if entry.error:
        return row | {"rc": "fetch", "error": entry.error}
    m = corpus.BY_KEY[entry.key]
    original = onnx.load(str(entry.path))
    symbolic = symbolic_inputs(unknown_negative_dims(original))
    if not any(isinstance(d, str) for dims in symbolic.values() for d in dims):
        return row | {"skipped": "no symbolic input dim"}
    opt = {name: list(m.input_shapes.get(name) or []) for name in symbolic}
    groups = dim_groups(symbolic, opt)
    fixed = _real_samples(entry.npz, list(symbolic))
    built = build_range(symbolic, opt, corpus_step(m))
    say(f"{entry.key}: built range {describe(built)}; probing the original model at its ends")
    ranges, row["narrowed"] = narrow(original, built, groups, opt, fixed, seed)
    row["range"] = to_json(ranges)
    row["override"] = range_override(ranges)
    row["probe_s"] = time.perf_counter() - t0
    say(f"{entry.key}: adapting with {row['override']}")
    r = adapt([*entry.args, row["override"], *overrides], None, timeout)
    row |= {"rc": r["rc"], "adapt_s": r["wall_s"]}
    if r["plan"] is None:
        return row | {"error": r["error"], "total_s": time.perf_counter() - t0}
    folder = r["plan_path"].parent
    row |= {"decision": r["plan"]["decision"], "accuracy_bound": r["plan"].get("accuracy_bound"),
            "execution_path": (r["plan"].get("execution_path") or {}).get("label"),
            "actions": [a["kind"] for a in r["plan"]["actions"]], "run_folder": str(folder)}
    say(f"{entry.key}: {row['decision']} ({row['adapt_s']:.0f} s); checking the plan across the range")
    t1 = time.perf_counter()
    try:
        row["check"] = check_run(folder, original, ranges, seed, fixed, groups)
    except Exception as exc:  # noqa: BLE001 - a check that breaks is the row's finding
        row["check_error"] = f"check: {short(exc, 300)}"
    row["check_s"] = time.perf_counter() - t1
    if peers:
        t2 = time.perf_counter()
        points = dict(check_points(ranges, groups, seed, 0))
        tuned = json.loads((folder / "plan.json").read_text()).get("shapes", {}).get("tuned") or {}
        points["opt"] = {name: list(tuned.get(name) or opt[name]) for name in ranges}
        row["peers"] = {}
        for name in PEER_POINTS:
            same = next((k for k, v in row["peers"].items() if v["shapes"] == points[name]), None)
            if same is not None:        # opt at an end of the range: timed once
                row["peers"][name] = dict(row["peers"][same], same_as=same)
                continue
            say(f"{entry.key}: peers vs meta-infer at {name} {points[name]}")
            row["peers"][name] = peers_at(folder, original, points[name], seed + 100, rounds,
                                          row["accuracy_bound"] or 0.01, fixed)
        row["peers_s"] = time.perf_counter() - t2
    row["total_s"] = time.perf_counter() - t0
    return row


# --- the report -------------------------------------------------------------------------------

def _yn(v) -> str:
    return "–" if v is None else "yes" if v else "no"


def _plan_speedup(row: dict, point: str) -> float | None:
    return next((p["speedup"] for p in (row.get("check") or {}).get("plan_points") or []
                 if point == p["name"] or point in p.get("also", ())), None)


def _vs(row: dict, point: str) -> float | None:
    return ((row.get("peers") or {}).get(point) or {}).get("vs_fastest")


def _vs_cell(row: dict, point: str) -> str:
    """meta-infer / the fastest peer within the bound at `point`; `*` where meta-infer's own loss
    there is above the bound (the comparison then flatters it)."""
    over = ((row.get("peers") or {}).get(point) or {}).get("meta_over")
    return report._x(_vs(row, point)) + ("*" if over else "")


def _runs_cell(c: dict) -> str:
    if not c:
        return "–"
    worst = "–" if c.get("worst_loss") is None else f"{c['worst_loss']:.2g}"
    orig = sum(bool(p.get("original_fails")) for p in c["points"])
    return (f"{c['n_ok']}/{c['n_points']}, worst {worst} / {c['bound']}"
            + (f" ({orig} the original cannot run)" if orig else ""))


def table(rows: list[dict], with_peers: bool) -> list[str]:
    head = ("| model | range | decision | symbols kept | runs at min, max + 5 points (ok, worst loss / bound) "
            "| refused outside | plan.json speed-up min / opt / max")
    head += " | vs fastest peer min / opt / max" if with_peers else ""
    head += " | adapt s | total s |"
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if r.get("skipped"):
            out.append(f"| {r['name']} | {r['skipped']} |" + " |" * (head.count("|") - 3))
            continue
        c = r.get("check") or {}
        cells = [r["name"], describe_json(r.get("range")) + (" (narrowed)" if r.get("narrowed") else ""),
                 r.get("decision") or f"failed ({r.get('rc')})", _yn(c.get("symbols_kept")), _runs_cell(c),
                 _yn(c.get("refused_outside")),
                 " / ".join(report._x(_plan_speedup(r, p)) for p in PEER_POINTS)]
        if with_peers:
            cells.append(" / ".join(_vs_cell(r, p) for p in PEER_POINTS))
        cells += [f"{r.get('adapt_s', 0):.0f}", f"{r.get('total_s', 0):.0f}"]
        out.append("| " + " | ".join(cells) + " |")
    g = [report._x(goals.gmean([_plan_speedup(r, p) for r in rows])) for p in PEER_POINTS]
    cells = ["geo-mean", "", "", "", "", "", " / ".join(g)]
    if with_peers:
        cells.append(" / ".join(report._x(goals.gmean([_vs(r, p) for r in rows])) for p in PEER_POINTS))
    return out + ["| " + " | ".join(cells + ["", ""]) + " |"]


def describe_json(raw: dict | None) -> str:
    return describe(from_json(raw)) if raw else "–"


def peers_detail(rows: list[dict]) -> list[str]:
    out = ["| model | point | shapes | meta-infer ms (loss) | fastest peer within the bound | its ms | speed-up |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        for point, p in (r.get("peers") or {}).items():
            if p.get("error"):
                out.append(f"| {r['name']} | {point} | {p['shapes']} | {p['error']} | | | |")
                continue
            over = ", above the bound" if p.get("meta_over") else ""
            same = f" (= {p['same_as']})" if p.get("same_as") else ""
            out.append(f"| {r['name']} | {point}{same} | {p['shapes']} | {report._f(p['meta_ms'], '.4g')} "
                       f"(loss {report._f(p.get('meta_loss'), '.2g')}{over}) | {p['fastest'] or 'none'} "
                       f"| {report._f(p['fastest_ms'], '.4g')} | {_vs_cell(r, point)} |")
    return out


def findings(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        lines = [f"- narrowed: {n}" for n in r.get("narrowed") or []]
        c = r.get("check") or {}
        lines += [f"- {p['name']} {p['shapes']}: {p['error']}" for p in c.get("points") or [] if p.get("error")]
        if c.get("fixed_dims"):
            lines.append(f"- model.onnx fixes {', '.join(c['fixed_dims'])}")
        if c and c.get("refused_outside") is not True:
            lines.append(f"- outside the range: {c.get('refused')}")
        if r.get("check_error"):
            lines.append(f"- {r['check_error']}")
        for point, p in (r.get("peers") or {}).items():
            lines += [f"- peers at {point}: {k}: {v['error']}" for k, v in (p.get("compare") or {}).items()
                      if (v or {}).get("error") and not p.get("same_as")]
        if r.get("error"):
            lines += ["", "```", r["error"].strip(), "```"]
        if lines:
            out += ["", f"### {r['name']}", "", *lines]
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.shape_ranges", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated corpus keys")
    ap.add_argument("--timeout", type=float, default=1800.0, help="per adapt, seconds")
    ap.add_argument("--no-peers", dest="peers", action="store_false")
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--artifacts", type=Path, help="paths.artifacts (default: a temporary folder, removed)")
    ap.add_argument("--json", type=Path)
    args, overrides = ap.parse_known_args(argv)
    keys = args.only.split(",") if args.only else [m.key for m in corpus.CORPUS]
    unknown = corpus.unknown_keys(keys)
    if unknown:
        print(unknown, file=sys.stderr)
        return 2
    say = lambda msg: print(f"(shape ranges: {msg})", file=sys.stderr, flush=True)  # noqa: E731
    rows = []
    with tempfile.TemporaryDirectory(prefix="metainfer-shape-ranges-") as tmp:
        artifacts = args.artifacts or Path(tmp)
        for entry in modelset.entries(keys, with_corpus=True, samples=corpus.SAMPLES):
            try:
                rows.append(bench_one(entry, modelset.with_artifacts(overrides, artifacts), args.timeout, args.peers,
                                      args.rounds, say=say))
            except Exception as exc:  # noqa: BLE001 - one model's breakage is its row
                rows.append({"name": entry.key, "error": f"bench: {short(exc, 400)}"})
            print("\n".join(table(rows[-1:], args.peers)[2:3]), file=sys.stderr, flush=True)
    print("\n".join(table(rows, args.peers)))
    if args.peers:
        print("\nAt each point, the peers of bench/peers.py and meta-infer's plan timed side by side on "
              f"{SAMPLES} real inputs fitted to that point ({args.rounds} interleaved rounds at least); speed-up: the fastest peer "
              "within plan.json's accuracy_bound over meta-infer (> 1: meta-infer faster; * where meta-infer's own "
              "loss there is above that bound):\n")
        print("\n".join(peers_detail(rows)))
    print("\n".join(findings(rows)))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1, default=_jsonable))
    return 1 if any(r.get("error") or r.get("check_error") for r in rows) else 0


def _jsonable(x):
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return str(x)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
