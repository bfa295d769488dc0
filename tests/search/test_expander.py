"""The expander (search/expander.py): which expansions a coasting dive may take (warm), a child
over the accuracy bound remembered at its zero-loss score, the pruning view an action's hook
reads (int8's float layers left out where they cannot pay: actions/float_layers.py), the
unchanged graph scored on every execution path first, and equivalent plans merged by their
canonical graph hash (Candidate.key, ir/graph_hash.py)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from metainfer_core.accuracy.metric import plan_loss
from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.actions.float_layers import DOMINATED, NEEDLESS
from metainfer_core.ir.directives import FUSION_KEY, STRATEGY_KEY
from metainfer_core.ir.graph_hash import graph_hash
from metainfer_core.ir.graph_utils import clone
from metainfer_core.normalize import normalize
from metainfer_core.search import Candidate, Evaluator, beam_search
from metainfer_core.search.beam import SearchResult
from metainfer_core.search.budget import Budget
from metainfer_core.search.expander import Expander, _memo
from metainfer_core.search.path_costs import PathCosts
from metainfer_core.zoo import build

from search.fakes import FakeClock
from search.helpers import INT8_FAST, INT8_SLOW, LOSSY, ONE_INT8, Priced, searched
from twins import BALANCED, FakeCostModel, backend


def _expander(ev: Evaluator, default: Candidate, ctx: ActionContext, budget_s: float = 60) -> Expander:
    """An expander of `default` over an empty space, its budget on a fake clock."""
    budget = Budget(FakeClock(), budget_s, True, ev.fresh_cost_prior_s())
    return Expander(SearchResult(default=default, top=[]), ev, {}, ctx, budget)


def _pruned(run: Expander, state: Candidate, params: dict, site="site") -> str | None:
    """What the expander asks before it applies int8 with `params` on `state`: the prune of its
    action's hook, given the scored plan lowering every layer (Expander._first_time)."""
    int8 = ACTIONS["int8"]
    whole = run.scored.get(_memo(state, int8.name, site, int8.whole(params)))
    return int8.pruned(params, whole, run)


def test_a_coasting_dive_takes_only_steps_that_measure_nothing_new(models):
    """What a coasting dive may take: a tiling (a rewrite scored on measured tables), not a
    precision whose sensitivity is unmeasured, an outside quantizer (it calibrates) or int8's
    float layers fitted by runs."""
    m, feeds, reference = models["resnet_tiny"]
    be = backend("cpu")
    ev = Evaluator(FakeCostModel(), be.info, BALANCED, 0.01, feeds, reference, LOSSY, clock=FakeClock())
    default = Candidate(m)
    ev.set_baseline(default)
    run = _expander(ev, default, ActionContext(target=be.info, calibration_feeds=feeds))
    int8 = ACTIONS["int8"].with_defaults({})
    assert run.warm(default, ACTIONS["tiling"], ACTIONS["tiling"].with_defaults({}))
    assert not run.warm(default, ACTIONS["fp16"], ACTIONS["fp16"].with_defaults({}))
    ev.sensitivity.table("int8", int8)          # int8's own form measured: now warm
    assert run.warm(default, ACTIONS["int8"], int8)
    assert not run.warm(default, ACTIONS["int8"], {**int8, "engine": "onnxruntime"})
    assert not run.warm(default, ACTIONS["int8"], {**int8, "float_layers": "fit"})


def test_a_child_over_the_accuracy_bound_is_remembered_at_its_zero_loss_score(models):
    """int8 over a bound nothing meets: the child is pruned (not filed, not made again), but its
    score at zero loss is kept for the float-layer prune (it is what keeping layers float could
    reach; dropped with the child, the prune read every int8 graph bound to OpenVINO over the
    bound as absent and left PP-OCR's float-layer plans out)."""
    m, feeds, reference = models["resnet_tiny"]
    be = backend("cpu")
    ev = Evaluator(Priced(**INT8_FAST), be.info, BALANCED, 1e-12, feeds, reference, LOSSY, clock=FakeClock())
    default = Candidate(m)
    ev.set_baseline(default)
    ctx = ActionContext(target=be.info, calibration_feeds=feeds)
    run = _expander(ev, default, ctx)
    run.budget.deadline = float("inf")
    params = ACTIONS["int8"].with_defaults({"scope": "compute"})
    site = ACTIONS["int8"].sites(m, params, be.info)[0]
    frontier, stepping = [], []
    assert run.consider(default, ACTIONS["int8"], params, site, frontier, stepping, float("inf")) is None
    memo = _memo(default, "int8", site, params)
    assert run.made[memo] is None and run.scored[memo].violation and not frontier and run.result.pruned == {"accuracy": 1}
    logged = run.result.log[-1]
    assert run.at_zero[memo] == pytest.approx(logged["score"] - BALANCED.accuracy * logged["loss"]) and logged["loss"] > 0


def test_float_layers_are_not_tried_where_whole_int8_cannot_beat_the_default(models):
    """int8 predicted 10x slower: keeping its most sensitive layers in float cannot make it pay
    (and choosing them would measure int8's sensitivity), so those choices are left out unmade;
    where int8 can pay they are made as before."""
    space = {"int8": {**ONE_INT8, "float_layers": [0, 1, 2]}}
    slow, ev = searched(models, Priced(**INT8_SLOW), space)
    assert slow.pruned.get(DOMINATED) == 2 and slow.evaluated == 1 and not slow.top, (slow.pruned, slow.evaluated)
    assert [e["steps"][0].split("float_layers=")[1].split(",")[0] for e in slow.log if e.get("pruned") == DOMINATED] \
        == ["1", "2"]                                   # the search log names what was left out and why
    assert not ev.sensitivity.parts
    fast, _ = searched(models, Priced(**INT8_FAST), space)
    assert DOMINATED not in fast.pruned and fast.top


def test_float_layers_are_tried_where_whole_int8_pays_on_another_path_even_over_the_bound():
    """Whole int8 cannot beat the default where it is (predicted slow there, its loss deferred),
    but bound to OpenVINO it ranks ahead at zero loss, over the accuracy bound: float layers bring
    the loss within the bound at about that speed (wakeword's int8 + OpenVINO plan was lost to
    this prune), so they are tried; without a bound plan that pays, they are not."""
    params = dict(ACTIONS["int8"].with_defaults({}), float_layers="fit")
    state, whole = Candidate(None, key="state"), Candidate(None, key="whole", score=1.12)
    run = Expander.__new__(Expander)
    run.scored, run._fastest_bound = {_memo(state, "int8", "site", {**params, "float_layers": 0}): whole}, {}
    run.evaluator = SimpleNamespace(base_score=1.0, weights=BALANCED, max_loss=0.01)
    assert _pruned(run, state, params) == DOMINATED
    bound = Candidate(None, key="bound", score=0.92 + BALANCED.accuracy * 0.016, accuracy_loss=0.016)   # over 0.01
    run._fastest_bound[id(whole)] = run.zero_loss_score(bound)
    assert run.zero_loss_score(bound) == pytest.approx(0.92)
    assert run.fastest_bound(whole, 1.12) == pytest.approx(0.92)
    assert _pruned(run, state, params) != DOMINATED
    run._fastest_bound[id(whole)] = 1.05          # bound, still behind the default: nothing to gain
    assert _pruned(run, state, params) == DOMINATED


def test_float_layers_are_not_tried_where_whole_int8_is_well_within_the_bound():
    """Whole int8 scored within the bound with room to spare (ddddocr's detector: 0.002 of 0.01):
    its float-layer variants could gain only that loss in the score while adding float time, and
    took the budget OpenVINO's form and ONNX Runtime's quantizer needed; near the bound, or with
    its estimate deferred, they are still tried."""
    params = dict(ACTIONS["int8"].with_defaults({}), float_layers=2)
    state = Candidate(None, key="state")
    run = Expander.__new__(Expander)
    run.evaluator = SimpleNamespace(base_score=1.0, weights=BALANCED, max_loss=0.01)
    run._fastest_bound = {}
    for loss, deferred, needless in ((0.002, False, True), (0.008, False, False), (0.0, True, False)):
        whole = Candidate(None, key="whole", score=0.8 + loss, accuracy_loss=loss, accuracy_deferred=deferred)
        run.scored = {_memo(state, "int8", "site", {**params, "float_layers": 0}): whole}
        assert (_pruned(run, state, params) == NEEDLESS) is needless, (loss, deferred)
        assert _pruned(run, state, params) != DOMINATED
    assert NEEDLESS.startswith("float layers")


def test_the_unchanged_graph_is_scored_on_every_execution_path_before_any_rewrite(models, monkeypatch):
    """A large graph's rewrites took a search's whole share (a layout detector: four tilings
    scored in 8 s, the default kept where OpenVINO ran it 1.35x faster). The unchanged graph on
    each path the target offers comes first, so a budget the rewrites use up still has it (each
    tiling here takes 1.5 s of a 4 s budget, on the fake clock)."""
    m, feeds, reference = models["resnet_tiny"]
    be = backend("cpu")
    if "openvino:f32" not in be.info.extra.get("execution_paths", []):
        pytest.fail("the host offers no OpenVINO path (openvino is pinned in requirements.lock)")
    clock = FakeClock()
    tiling = type(ACTIONS["tiling"])
    monkeypatch.setattr(tiling, "apply", clock.slowed(tiling.apply, 1.5))     # a rewrite of a 500-node graph
    ev = Evaluator(FakeCostModel(), be.info, BALANCED, 0.01, feeds, reference, LOSSY,
                   paths=PathCosts(be, feeds, reference, plan_loss), clock=clock)
    space = {"tiling": {"tiles": [2, 4, 8], "axis": ["height"]}, "binding": {"runtime": ["openvino"], "precision": ["f32"]}}
    res = beam_search(m, space, ev, ActionContext(target=be.info, calibration_feeds=feeds), beam_width=2, depth=3,
                      top_k=3, time_budget_s=4.0, clock=clock)
    first = next(e for e in res.log if e.get("score") is not None)
    assert first["path"] == "openvino:f32" and [s.split("(")[0] for s in first["steps"]] == ["binding"], first
    assert "openvino:f32|fp32" in ev.paths.measured


def test_canonical_hash_ignores_names_and_equivalent_orders():
    """What the expander merges equivalent plans by (Candidate.key: ir/graph_hash.py's hash)."""
    m = normalize(build("resnet_tiny"), None).model
    renamed = clone(m)
    names = {}
    for i, n in enumerate(renamed.graph.node):
        n.name = f"node{i}"
        for j, o in enumerate(n.output):
            if o not in {x.name for x in renamed.graph.output}:
                names[o] = f"t{i}_{j}"
                n.output[j] = names[o]
    for n in renamed.graph.node:
        n.input[:] = [names.get(t, t) for t in n.input]
    assert graph_hash(renamed) == graph_hash(m)
    swapped = clone(m)                  # the 1x1 shortcut of a downsampling block may run before its 3x3 sibling
    nodes = list(swapped.graph.node)
    i = next(k for k, n in enumerate(nodes) if n.op_type == "Conv" and any(
        o.op_type == "Conv" and o.input[0] == n.input[0] for o in nodes[k + 1:]))
    j = next(k for k in range(i + 1, len(nodes)) if nodes[k].op_type == "Conv" and nodes[k].input[0] == nodes[i].input[0])
    nodes.insert(i, nodes.pop(j))
    del swapped.graph.node[:]
    swapped.graph.node.extend(nodes)
    assert graph_hash(swapped) == graph_hash(m)
    tagged_a, tagged_b = clone(m), clone(m)
    for t, label in ((tagged_a, "fg0"), (tagged_b, "fg7")):
        for n in t.graph.node[:2]:
            n.metadata_props.add(key=FUSION_KEY, value=label)
    assert graph_hash(tagged_a) == graph_hash(tagged_b) != graph_hash(m)
    with_policy = clone(m)
    with_policy.metadata_props.add(key=STRATEGY_KEY, value="none")
    assert graph_hash(with_policy) != graph_hash(m)
    info = backend("gpu").info         # commuting actions reach one graph: fuse then layout == layout then fuse
    ctx = ActionContext(target=info)

    def step(model, name, params):
        return ACTIONS[name].apply(model, ACTIONS[name].sites(model, params, info)[0], params, ctx)

    fuse = {"max_depth": 2, "span": "epilogue"}
    assert graph_hash(step(step(m, "fuse_chain", fuse), "layout", {})) == graph_hash(step(step(m, "layout", {}), "fuse_chain", fuse))
    other_weights = clone(m)
    other_weights.graph.initializer[0].raw_data = bytes(len(other_weights.graph.initializer[0].raw_data))
    assert graph_hash(other_weights) != graph_hash(m)
