"""Mixed precision as a searchable choice: an int8 step that keeps its k most accuracy-sensitive
layers in float (the `float_layers` parameter of `int8`).

Which layers are the most sensitive is a property of the model and the run's inputs, not of the
graph alone, so the step's site is narrowed where the run's context is known: the search puts a
ranking into the actions' shared cache (`provide_ranking`: per node, the loss of that node alone
in int8, from the per-node sensitivity it measures anyway) and `expand` narrows each int8 site
with it (`narrowed`). Without a ranking (profiling, predictor training) only k = 0 is offered.
The narrowed site is what the step records and applies, so the plan, the accuracy estimate and
the accuracy guard's replay all see the float layers as simply out of scope."""
from __future__ import annotations

from typing import Callable

from metainfer_core.actions.base import Site, Step, origins

FLOAT_LAYERS = "float_layers"
FIT = "fit"         # the fewest most sensitive layers that bring the estimated loss within the bound
FLOAT_LAYERS_DOMAIN = (0, 1, 2, 4, 8, FIT)
RANKING_KEY = "int8.float_ranking"
FITS_KEY = "int8.float_fits"

# params (without float_layers) -> node -> the loss of that node alone in int8
Ranking = Callable[[dict], dict[str, float]]
# (params without float_layers, the nodes left in int8, exact) -> whether the loss is within the
# bound: estimated, or (exact) estimated and then measured by a run on the validation inputs
Fits = Callable[[dict, tuple[str, ...], bool], bool]


def provide_ranking(cache: dict, ranking: Ranking, fits: Fits | None = None) -> None:
    cache[RANKING_KEY] = ranking
    if fits is not None:
        cache[FITS_KEY] = fits


def numeric_params(params: dict) -> dict:
    """The parameters that change a quantized node's numerics (float_layers only picks nodes)."""
    return {k: v for k, v in params.items() if k != FLOAT_LAYERS}


def numeric_steps(steps: tuple[Step, ...]) -> tuple[Step, ...]:
    """The steps as a sensitivity table keys them: float_layers dropped (its choice is already in
    the site), so every k shares the one table measured for its int8 variant."""
    return tuple(Step(s.kind, s.site, tuple((k, v) for k, v in s.params if k != FLOAT_LAYERS)) for s in steps)


def most_sensitive(nodes: tuple[str, ...], sensitivity: dict[str, float], k: int) -> list[str]:
    """The k nodes of `nodes` with the highest sensitivity (a derived node counts by its origins);
    nodes with none measured, or none at all, are never picked."""
    def score(n: str) -> float:
        return max((sensitivity.get(o, 0.0) for o in origins(n)), default=0.0)

    ranked = sorted((n for n in nodes if score(n) > 0), key=lambda n: (-score(n), n))
    return ranked[:k]


EXACT_FIT_PROBES = 2     # runs of the lowered graph one fit may spend (each a whole-model run per input)


def _fitted(site: Site, ranked: list[str], params: dict, fits: Fits) -> int | None:
    """How many of the ranked nodes must stay float for the rest to fit the bound: the fewest by
    the estimate (it never falls as more nodes are lowered: a bisection, free), then checked by
    a run, halfway to all float where that still breaks it (estimates ran several times low on a
    CQT front end), at most EXACT_FIT_PROBES runs. None when the whole site fits by the estimate
    (k = 0 is that plan) or no probe fits."""
    def rest(k: int) -> tuple[str, ...]:
        out = set(ranked[:k])
        return tuple(n for n in site.nodes if n not in out)

    if fits(params, rest(0), False) or not fits(params, rest(len(ranked)), False):
        return None
    lo, hi = 0, len(ranked)          # rest(lo) does not fit, rest(hi) does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(params, rest(mid), False) else (mid, hi)
    for _ in range(EXACT_FIT_PROBES):
        if fits(params, rest(hi), True):
            return hi
        if hi == len(ranked):
            return None
        hi = (hi + len(ranked) + 1) // 2
    return None


def narrowed(site: Site, params: dict, cache: dict | None) -> Site | None:
    """The site with its `float_layers` most sensitive nodes left out (FIT: as many as bring the
    estimated loss within the bound); k = 0 as it is. None when k > 0 and no ranking is known,
    when nothing would be left to quantize, or when the search knows the plan's estimated loss
    breaks the bound (it would prune the plan after an apply that costs seconds on a large graph:
    the time goes to the choices that can fit instead)."""
    k = params.get(FLOAT_LAYERS, 0) or 0
    if k == 0:
        return site
    if params.get("scope", "compute") != "compute":
        return None         # float layers are chosen among the weighted layers, where int8 pays
    cache = cache or {}
    ranking, fits = cache.get(RANKING_KEY), cache.get(FITS_KEY)
    if ranking is None or (k == FIT and fits is None):
        return None
    table = ranking(numeric_params(params))
    if k == FIT:
        ranked = most_sensitive(site.nodes, table, len(site.nodes))
        k = _fitted(site, ranked, numeric_params(params), fits)
        if k is None:
            return None
    floats = set(most_sensitive(site.nodes, table, k))
    if len(floats) < k:
        return None         # fewer sensitive layers than asked: the same plan as a smaller k
    kept = tuple(n for n in site.nodes if n not in floats)
    if not kept or (fits is not None and not fits(numeric_params(params), kept, False)):
        return None
    return Site(kept, f"{site.label}, {k} float")
