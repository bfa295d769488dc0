"""The finalists handed to verify (search/finalists.py): a plan's kind and breadth (a form
native to the runtime it is bound to is one choice with its binding), the top exact-checked
with twins after every distinct plan and, past the search's end, checked until one lossy plan
passed; the explored plans, one per kind the top lacks, single kinds and outside quantizers
first, within their own predicted verify time."""
from __future__ import annotations

from types import SimpleNamespace

from metainfer_core.actions import ACTIONS, Site, Step
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.backends.timing import runs_per_sample
from metainfer_core.ir.graph_utils import clone
from metainfer_core.search import Candidate
from metainfer_core.search.beam import SearchResult
from metainfer_core.search.finalists import breadth, exact_top, explored, kind_of, lossy, outside, twins_last
from metainfer_core.zoo import build

OPENVINO = ExecutionPath("openvino", "f32")


def _never() -> bool:
    return False


def _always() -> bool:
    return True


def _checked(c):
    c.accuracy_exact = True
    return c


def _plan(model, *steps: tuple[str, dict], path: ExecutionPath | None = None, **fields) -> Candidate:
    """A candidate of `steps` (action, params), its params as the action fills them in, its
    graph bound to `path` where given (as the binding action writes it)."""
    m = clone(model)
    if path is not None:
        path.write_to(m)
    full = [(k, ACTIONS[k].with_defaults(p)) for k, p in steps]
    return Candidate(m, tuple(Step(k, Site(("n",), "all"), tuple(sorted(p.items()))) for k, p in full), **fields)


def test_a_form_native_to_the_runtime_it_is_bound_to_is_one_choice_with_its_binding():
    """int8 in OpenVINO's form (placement inputs) bound to openvino:f32 is one choice, the same
    form unbound or meta-infer's QDQ form bound there two; NNCF writes OpenVINO's form too (an
    outside tool); a lossless plan on the default path is of no kind, bound elsewhere of its
    path's."""
    model = build("mlp")
    ov_form = {"placement": "inputs"}
    native = _plan(model, ("int8", ov_form), ("binding", {"runtime": "openvino", "precision": "f32"}), path=OPENVINO)
    assert ExecutionPath.of(native.model) == OPENVINO and OPENVINO.label == "openvino:f32"
    assert kind_of(native) == ("int8:openvino-form", "openvino:f32") and breadth(native) == 1
    unbound = _plan(model, ("int8", ov_form))
    assert kind_of(unbound) == ("int8:openvino-form",) and breadth(unbound) == 1
    qdq = _plan(model, ("int8", {"placement": "inputs_outputs"}), path=OPENVINO)
    assert kind_of(qdq) == ("int8", "openvino:f32") and breadth(qdq) == 2
    nncf = _plan(model, ("int8", {"placement": "inputs", "engine": "nncf"}), path=OPENVINO)
    assert kind_of(nncf) == ("int8:nncf", "openvino:f32") and breadth(nncf) == 1
    assert outside(nncf) and not outside(native) and lossy(native)
    plain = _plan(model, ("tiling", {}))
    assert kind_of(plain) == () and breadth(plain) == 0 and not lossy(plain)
    assert kind_of(_plan(model, ("tiling", {}), path=OPENVINO)) == ("openvino:f32",)
    # two precisions: one kind, its labels sorted, each a choice
    both = _plan(model, ("int8", {}), ("fp16", {}), path=OPENVINO)
    assert kind_of(both) == ("fp16", "int8", "openvino:f32") and breadth(both) == 3


def test_a_native_form_bound_to_its_runtime_is_explored_as_a_single_kind():
    """One choice with its binding, OpenVINO's int8 form there is explored before a plan of two
    choices scored better (meta-infer's QDQ form on OpenVINO)."""
    model = build("mlp")
    native = _plan(model, ("int8", {"placement": "inputs"}), path=OPENVINO, latency_ms=1.0, score=0.9)
    qdq = _plan(model, ("int8", {"placement": "inputs_outputs"}), path=OPENVINO, latency_ms=1.0, score=0.5)
    out = explored({kind_of(c): c for c in (qdq, native)}, [], None, 1, float("inf"),
                   SearchResult(default=None, top=[]), _never)
    assert out == [native]


def test_explored_plans_are_limited_by_their_own_predicted_verify_time():
    """The explorers: one per kind the top lacks, an outside quantizer's first, until the plans'
    predicted latencies (each timed run with its settle runs) fill one verify round's allowance;
    a slow default does not count (it is verified anyway)."""
    model = build("mlp")
    kinds = {kind: Candidate(model, (Step(kind, Site((), "all"), ()),), latency_ms=ms, score=score)
             for kind, ms, score in (("fp16", 60.0, 0.5), ("int8", 70.0, 0.4), ("int8_dynamic", 1.0, 0.6))}
    best_of_kind = {(k,): c for k, c in kinds.items()}
    pick = lambda round_ms: [c.steps[0].kind for c in explored(best_of_kind, [], None, 5, round_ms,   # noqa: E731
                                                                 SearchResult(default=None, top=[]), _never)]
    assert pick(float("inf")) == ["int8", "fp16", "int8_dynamic"]      # best score first
    assert pick(100.0) == ["int8", "int8_dynamic"]                      # fp16 (60 ms) no longer fits beside int8
    assert pick(runs_per_sample(1.0) * 1.0) == ["int8_dynamic"]
    # an outside quantizer's plan (ONNX Runtime's, on its own op set) first, though ranked last
    ort = Step("int8", Site((), "all"), (("engine", "onnxruntime"), ("scope", "all")))
    best_of_kind[("int8:onnxruntime",)] = Candidate(model, (ort,), latency_ms=1.0, score=0.9)
    assert [kind_of(c) for c in explored(best_of_kind, [], None, 2, float("inf"), SearchResult(default=None, top=[]),
                                         _never)] == [("int8:onnxruntime",), ("int8",)]
    # a plan whose exact check (the top's, made before) broke the bound is no explorer: verify
    # would only time it and try to repair it
    best_of_kind[("int8:onnxruntime",)].violation = "accuracy: loss 0.066 exceeds accuracy.max_loss 0.01"
    assert [kind_of(c) for c in explored(best_of_kind, [], None, 2, float("inf"), SearchResult(default=None, top=[]),
                                         _never)] == [("int8",), ("fp16",)]


def test_plans_the_predictor_cannot_tell_apart_are_verified_after_every_distinct_one():
    """int8 with the other activation type, scored within 1 % of the one made before it, goes
    after the distinct plans (the first made stands for both); 1.5 % apart, two plans of a kind
    are both distinct."""
    model = build("mlp")
    plan = lambda act, fl, score: Candidate(model, (Step("int8", Site((), "all"), (("activation_type", act),  # noqa: E731
                                                                                    ("float_layers", fl))),), score=score)
    u8, fl1, fp16, s8 = plan("QUInt8", 0, 0.772), plan("QUInt8", 1, 0.76), Candidate(
        model, (Step("fp16", Site((), "all"), ()),), score=0.78), plan("QInt8", 0, 0.7715)
    made_at = {id(u8): 1, id(fl1): 2, id(fp16): 3, id(s8): 5}
    assert twins_last([s8, fp16, fl1, u8], made_at) == [fl1, u8, fp16, s8]


def test_past_the_searchs_end_the_best_lossy_plan_is_still_checked_until_one_passes():
    """The expansions overran into the exact checks' share (outside quantizers calibrating on a
    large detector): the best lossy plan is still checked and verified beside the lossless one,
    the next lossy one is not (one that passed is enough past the end)."""
    def plan(key, kind, score):
        return Candidate(None, (Step(kind, Site(("n",), "all"), ()),), score=score, accuracy_exact=kind != "int8",
                         key=key)

    default = Candidate(None, score=1.0, key="default")
    pool = [plan("int8 a", "int8", 0.5), plan("int8 b", "int8", 0.6), plan("binding", "binding", 0.8)]
    top = exact_top(pool, default, SimpleNamespace(exact=_checked), 3, SearchResult(default=default, top=[]), _always)
    assert [c.key for c in top] == ["int8 a", "binding"]


def test_past_the_searchs_end_one_outside_quantizers_plan_is_still_checked_to_be_explored():
    """The search's last seconds went elsewhere: the plan of ONNX Runtime's quantize_static (the
    fastest peer's own graph on a text detector) is still checked and explored; meta-infer's own
    form of the same precision is not (past the end only an outside quantizer's, and one)."""
    model = build("mlp")

    def plan(kind, score, **params):
        return Candidate(model, (Step(kind, Site(("n",), "all"), tuple(sorted(params.items()))),), latency_ms=1.0,
                         score=score, accuracy_exact=False)

    own, ort = plan("fp16", 0.7), plan("int8", 0.8, engine="onnxruntime")
    out = explored({kind_of(c): c for c in (own, ort)}, [], SimpleNamespace(exact=_checked), 4, float("inf"),
                   SearchResult(default=None, top=[]), _always)
    assert out == [ort] and ort.accuracy_exact and not own.accuracy_exact
    # two outside quantizers' plans unchecked: past the end, one only
    ort, nncf = plan("int8", 0.8, engine="onnxruntime"), plan("int8", 0.9, engine="nncf", placement="inputs")
    assert kind_of(ort) != kind_of(nncf)
    out = explored({kind_of(c): c for c in (own, ort, nncf)}, [], SimpleNamespace(exact=_checked), 4, float("inf"),
                   SearchResult(default=None, top=[]), _always)
    assert out == [ort] and not nncf.accuracy_exact
