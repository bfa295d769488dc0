"""Mixed precision as a searchable choice: an int8 step that keeps its k most accuracy-sensitive
layers in float (the `float_layers` parameter of `int8`).

Which layers are the most sensitive is a property of the model and the run's inputs, not of the
graph alone, so the step's site is narrowed where the run's context is known: the search puts a
ranking into the actions' shared cache (`provide_ranking`: per node, the loss of that node alone
in int8, from the per-node sensitivity it measures anyway) and `expand` narrows each int8 site
with it (`narrowed`). Without a ranking (profiling, predictor training) only k = 0 is offered.
`fit` weighs what each float layer costs too (`costs`: the predictor's latency per node of the
default graph, where the search provides it): a large layer kept float gives back more of
int8's speed than a small one of the same loss.
The narrowed site is what the step records and applies, so the plan, the accuracy estimate and
the accuracy guard's replay all see the float layers as simply out of scope."""
from __future__ import annotations

from typing import Callable

from metainfer_core.actions.base import Site, Step, origins

FLOAT_LAYERS = "float_layers"
FIT = "fit"         # the float layers that bring the loss within the bound at the least cost (_fitted)
FLOAT_LAYERS_DOMAIN = (0, 1, 2, 4, 8, FIT)
RANKING_KEY = "int8.float_ranking"
SHARES_KEY = "int8.float_shares"
COSTS_KEY = "int8.float_costs"

# params (without float_layers) -> node -> the loss of that node alone in int8
Ranking = Callable[[dict], dict[str, float]]
# (params without float_layers, the nodes left in int8, exact) -> their loss as a share of the
# bound (within it at most 1): estimated, or (exact) measured by a run on the validation inputs
Shares = Callable[[dict, tuple[str, ...], bool], float]
# () -> node -> what keeping it float costs (the predictor's float latency of its kernel, ms)
Costs = Callable[[], dict[str, float]]


def provide_ranking(cache: dict, ranking: Ranking, shares: Shares | None = None, costs: Costs | None = None) -> None:
    cache[RANKING_KEY] = ranking
    if shares is not None:
        cache[SHARES_KEY] = shares
    if costs is not None:
        cache[COSTS_KEY] = costs


def kept_float(params: dict, scope: str) -> str:
    """How many layers a step keeps float, in words ('' for none; `scope`: its site's label,
    which says how many a fit chose)."""
    k = params.get(FLOAT_LAYERS) or 0
    if k == FIT:
        k = next((w.split()[0] for w in str(scope).split(", ")[1:] if w.endswith("float")), "the")
    return f"{k}" if k else ""


def share_of(loss: float, bound: float) -> float:
    """A loss as a share of its bound (a zero bound admits only no loss)."""
    return loss / bound if bound > 0 else (0.0 if loss <= 0 else float("inf"))


def numeric_params(params: dict) -> dict:
    """The parameters that change a quantized node's numerics (float_layers only picks nodes)."""
    return {k: v for k, v in params.items() if k != FLOAT_LAYERS}


def _score(n: str, sensitivity: dict[str, float]) -> float:
    """A node's sensitivity (a derived node counts by its origins)."""
    return max((sensitivity.get(o, 0.0) for o in origins(n)), default=0.0)


def most_sensitive(nodes: tuple[str, ...], sensitivity: dict[str, float], k: int) -> list[str]:
    """The k nodes of `nodes` with the highest sensitivity; nodes with none measured, or none at
    all, are never picked."""
    ranked = sorted((n for n in nodes if _score(n, sensitivity) > 0), key=lambda n: (-_score(n, sensitivity), n))
    return ranked[:k]


def most_sensitive_per_cost(nodes: tuple[str, ...], sensitivity: dict[str, float],
                            costs: dict[str, float]) -> list[str]:
    """The nodes most_sensitive ranks, by sensitivity per unit of what keeping each float costs:
    several small layers may buy the bound back for less speed than one large one."""
    floor = min((c for c in costs.values() if c > 0), default=1.0)

    def cost(n: str) -> float:
        return max(sum(costs.get(o, 0.0) for o in origins(n)), floor)

    return sorted(most_sensitive(nodes, sensitivity, len(nodes)), key=lambda n: (-_score(n, sensitivity) / cost(n), n))


EXACT_FIT_PROBES = 4     # runs of the lowered graph one fit may spend (each a whole-model run per input)
REPROBE_MARGIN = 0.9     # a re-probe aims this far inside the bound: the estimates' error varies from set to set


def _fitted(site: Site, orders: list[list[str]], params: dict, shares: Shares,
            costs: dict[str, float]) -> frozenset[str] | None:
    """Which ranked nodes stay float for the rest to fit the bound. Per order (by sensitivity;
    by sensitivity per cost), the shortest prefix that fits by the estimate (it never falls as
    more nodes are lowered: a bisection, free), then the costliest of its nodes lowered again
    where the estimate still fits; of these, the set that costs least, checked by a run. The
    estimates run several times low on some models (a CQT front end, a text detector) and
    several times high on others (a text tagger): where that run breaks the bound, or keeps
    well inside it, runs bisect the prefixes of the same order, the first guess the estimates
    scaled by what the run measured over what they said. Of the sets a run found within the
    bound the cheapest is kept (at most EXACT_FIT_PROBES runs in all). None when the whole site
    fits by the estimate (k = 0 is that plan) or no run fits."""
    def share(out, exact=False) -> float:
        return shares(params, tuple(n for n in site.nodes if n not in out), exact)

    def cost(out) -> float:
        return sum(costs.get(o, 0.0) for n in out for o in origins(n))

    def price(out) -> tuple[float, int]:       # the cheaper set, then the smaller
        return cost(out), len(out)

    def shortest(order: list[str], within: float) -> int | None:
        """The length of the shortest prefix of `order` whose estimated share is `within`."""
        if share(order) > within:
            return None
        lo, hi = 0, len(order)          # order[:lo] does not fit, order[:hi] does
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if share(order[:mid]) <= within else (mid, hi)
        return hi

    def thinned(out: set[str]) -> set[str]:
        for n in sorted(out, key=lambda n: (-cost([n]), n)):
            if share(out - {n}) <= 1:
                out = out - {n}
        return out

    if share(()) <= 1 or share(orders[0]) > 1:
        return None
    tried = [(order, thinned(set(order[:shortest(order, 1.0)]))) for order in orders]
    order, first = min(tried, key=lambda t: price(t[1]))
    measured, estimated = share(first, True), share(first)
    fitting = [first] if measured <= 1 else []
    if fitting and measured > REPROBE_MARGIN:
        return frozenset(first)         # close to the bound already: little left to gain
    # the bracket of prefix lengths: order[:lo] breaks the bound (the first set's size stands for
    # it where it broke), order[:hi] fits (the whole order assumed to until a run shows it)
    lo, hi = (0, len(first)) if fitting else (len(first), len(order))
    guess = shortest(order, estimated / measured * REPROBE_MARGIN) if estimated > 0 and measured > 0 else None
    for _ in range(EXACT_FIT_PROBES - 1):
        k = guess if guess is not None and lo < guess < hi else (lo + hi) // 2
        guess = None
        if not lo < k < hi:
            break
        if share(order[:k], True) <= 1:
            fitting.append(set(order[:k]))
            hi = k
        else:
            lo = k
    return frozenset(min(fitting, key=price)) if fitting else None


def narrowed(site: Site, params: dict, cache: dict | None) -> Site | None:
    """The site with its `float_layers` most sensitive nodes left out (FIT: the set `_fitted`
    chooses); k = 0 as it is. None when k > 0 and no ranking is known,
    when nothing would be left to quantize, or when the search knows the plan's estimated loss
    breaks the bound (it would prune the plan after an apply that costs seconds on a large graph:
    the time goes to the choices that can fit instead)."""
    k = params.get(FLOAT_LAYERS, 0) or 0
    if k == 0:
        return site
    if params.get("scope", "compute") != "compute":
        return None         # float layers are chosen among the weighted layers, where int8 pays
    cache = cache or {}
    ranking, shares = cache.get(RANKING_KEY), cache.get(SHARES_KEY)
    if ranking is None or (k == FIT and shares is None):
        return None
    table = ranking(numeric_params(params))
    if k == FIT:
        costs = cache[COSTS_KEY]() if COSTS_KEY in cache else {}
        orders = [most_sensitive(site.nodes, table, len(site.nodes))]
        if costs:
            orders.append(most_sensitive_per_cost(site.nodes, table, costs))
        fitted = _fitted(site, orders, numeric_params(params), shares, costs)
        if fitted is None:
            return None
        floats, k = set(fitted), len(fitted)
    else:
        floats = set(most_sensitive(site.nodes, table, k))
        if len(floats) < k:
            return None     # fewer sensitive layers than asked: the same plan as a smaller k
    kept = tuple(n for n in site.nodes if n not in floats)
    # a fixed k whose estimate breaks the bound is left out; fit's set was checked by its runs
    if not kept or (shares is not None and params[FLOAT_LAYERS] != FIT
                    and shares(numeric_params(params), kept, False) > 1):
        return None
    return Site(kept, f"{site.label}, {k} float")


# --- the search's hooks (Action.whole / pruned / prepare_search / known_loss of int8) ---------

DOMINATED = "float layers (the whole-precision plan cannot beat the default)"
NEEDLESS = "float layers (the whole-precision plan is well within the accuracy bound)"
WELL_WITHIN = 0.5       # of accuracy.max_loss: an estimate this far inside the bound is trusted


def whole_params(params: dict) -> dict | None:
    """For a float-layers choice: the same step with every layer lowered."""
    return {**params, FLOAT_LAYERS: 0} if params.get(FLOAT_LAYERS) else None


def pruned(whole, view) -> str | None:
    """Why keeping layers float cannot pay, given the scored plan lowering them all (`whole`):
    it cannot beat the default even at zero loss on any path bound so far (float layers only add
    float time, and choosing them measures the precision's sensitivity: seconds on a large
    graph), or its estimated loss is well within the bound already (they could gain only its
    accuracy term, within the predictor's resolution). Near the bound they are still tried."""
    if whole is None or whole.violation or view.base_score is None:
        return None
    # its plans bound to another path count even over the accuracy bound: float layers bring
    # the loss down, not the speed up
    at_zero = view.zero_loss_score(whole)
    if min(at_zero, view.fastest_bound(whole, at_zero)) >= view.base_score:
        return DOMINATED
    if (not whole.accuracy_deferred and whole.accuracy_loss <= WELL_WITHIN * view.max_loss
            and view.weights.accuracy * whole.accuracy_loss < view.resolution * abs(view.base_score)):
        return NEEDLESS
    return None


def _fit_key(kind: str, params: dict, nodes) -> tuple:
    # per engine: the estimate is meta-infer's form's for all, a run is of the engine's graph
    return (kind, tuple(sorted((k, v) for k, v in params.items() if k not in ("scope", FLOAT_LAYERS))),
            frozenset(o for n in nodes for o in origins(n)))


def prepare_search(action, cache: dict, estimates) -> None:
    """The ranking, the shares and the costs `narrowed` reads, from the search's estimates: the
    sensitivity table of the variant, a node set's loss share by the estimate or (exact) by a
    run of the default graph so lowered on its execution path, remembered per node set."""
    def shares(params: dict, nodes: tuple[str, ...], exact: bool) -> float:
        if not exact:
            step = Step(action.name, Site(nodes, "fit"), tuple(sorted(params.items())))
            return share_of(estimates.estimate((step,)), estimates.max_loss)
        key = _fit_key(action.name, params, nodes)
        site = Site(tuple(sorted(key[2])), "fit")
        loss = estimates.measured_loss(key, lambda: action.apply(estimates.model, site, params, estimates.ctx))
        return share_of(loss, estimates.max_loss)

    provide_ranking(cache, lambda params: estimates.table(action.name, params), shares, lambda: estimates.kernel_costs())


def known_loss(step: Step, estimates) -> float | None:
    """The loss a fit's run measured for this step's node set, if it did."""
    return estimates.known_loss(_fit_key(step.kind, dict(step.params), step.site.nodes))
