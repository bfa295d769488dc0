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
FLOAT_LAYERS_DOMAIN = (0, 1, 2, 4, 8)
RANKING_KEY = "int8.float_ranking"

# params (without float_layers) -> node -> the loss of that node alone in int8
Ranking = Callable[[dict], dict[str, float]]


def provide_ranking(cache: dict, ranking: Ranking) -> None:
    cache[RANKING_KEY] = ranking


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


def narrowed(site: Site, params: dict, cache: dict | None) -> Site | None:
    """The site with its `float_layers` most sensitive nodes left out; None when k > 0 and no
    ranking is known, or when nothing would be left to quantize."""
    k = int(params.get(FLOAT_LAYERS, 0) or 0)
    if k == 0:
        return site
    ranking = (cache or {}).get(RANKING_KEY)
    if ranking is None:
        return None
    floats = set(most_sensitive(site.nodes, ranking(numeric_params(params)), k))
    if len(floats) < k:
        return None         # fewer sensitive layers than asked: the same plan as a smaller k
    kept = tuple(n for n in site.nodes if n not in floats)
    return Site(kept, f"{site.label}, {k} float") if kept else None
