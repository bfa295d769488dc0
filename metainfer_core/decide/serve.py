"""The serving verdict (serving.concurrency > 1): the default, the plan the latency decision
kept and, on each execution path, the servable candidate verify timed fastest are each served
under the deployment's load with every serving setting their runtime offers
(serving/measure.py, in a process of its own), less the sessions-and-threads settings the
predictor scores worse than the best few (decide/serve_predicted.py). Under the load the
objective (search/score.py) weighs the p90 latency and the requests per second, both relative to the default's setting
that serves most, with the memory, accuracy and change terms verified one request at a time;
the latency percentile's bound is a hard constraint. Each plan's best setting holds the bound
and scores lowest; the plan served is the kept plan unless another scores lower beyond noise,
and no plan unless it scores no worse than the default (a plan that wins one request at a time
can lose under load: memory-bound, or a runtime's threads oversubscribing the cores; another
runtime can win there: OpenVINO's streams). With one request at a time there is nothing to
choose: the setting is one session at the serving threads, and nothing is measured again."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import onnx

from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.decide.serve_predicted import stage_predictor
from metainfer_core.search.score import Weights, memory_base
from metainfer_core.serving.batching import batch_rows
from metainfer_core.serving.load import LoadFigures
from metainfer_core.serving.measure import settings_for
from metainfer_core.serving.options import Setting, describe

Predict = Callable[[str, Setting], Any]      # (label, setting) -> serving/predicted.PredictedLoad or None

LOAD_NOISE = 0.03       # loads served alike differ by up to this share in requests/s and latency
LATENCY_Q = 90          # the latency percentile the score weighs under load

# (backend, [(label, model)], {label: settings}, feed, concurrency, duration_s) -> {label: [LoadFigures]}
LoadServer = Callable[..., dict[str, list[LoadFigures]]]


@dataclass
class Served:
    """One plan's best setting under the load, or why none held the bound."""
    label: str
    setting: Setting
    figures: dict[str, Any]
    holds_bound: bool
    score: float = 0.0                  # the objective under the load (lower is better)
    terms: dict[str, float] = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        return float(self.figures.get("throughput_per_s") or 0.0)


@dataclass
class ServingVerdict:
    mode: str
    cores: int
    concurrency: int
    request_threads: int
    percentile: float = 99.0
    bound_ms: float | None = None
    plan: Served | None = None           # the plan served (the default's when it is the default)
    default: Served | None = None
    keeps_plan: bool = True
    reason: str = ""
    measured: list[dict[str, Any]] = field(default_factory=list)   # every plan x setting under the load
    predicted: list[dict[str, Any]] = field(default_factory=list)  # settings scored before serving (serve_predicted)
    seconds: float = 0.0
    weights: dict[str, float] = field(default_factory=dict)         # the latency and throughput weights used
    confirmation: dict[str, Any] | None = None    # the plan chosen over the default, served again with it alone

    def record(self) -> dict[str, Any]:
        """plan.json's `serving`."""
        def served(s: Served | None) -> dict | None:
            return None if s is None else {"label": s.label, "setting": s.setting, "described": describe(s.setting),
                                           "holds_bound": s.holds_bound, "score": s.score, "terms": s.terms,
                                           **s.figures}
        return {"mode": self.mode, "cores": self.cores, "concurrency": self.concurrency,
                "request_threads": self.request_threads, "percentile": self.percentile, "bound_ms": self.bound_ms,
                "setting": self.plan.setting if self.plan else {"sessions": 1, "intra_op_threads": self.request_threads},
                "plan": served(self.plan), "default": served(self.default), "keeps_plan": self.keeps_plan,
                "reason": self.reason, "measured": self.measured, "predicted": self.predicted,
                "seconds": self.seconds, "weights": self.weights,
                "confirmation": self.confirmation}


def one_at_a_time(serving) -> ServingVerdict:
    """serving=latency at one request: the setting is the one latency verify measured."""
    return ServingVerdict(serving.name, serving.cores, 1, serving.request_threads,
                          reason="one request at a time: served as verified (one session, "
                                 f"{serving.request_threads} thread{'s' if serving.request_threads != 1 else ''})")


@dataclass(frozen=True)
class _Scoring:
    """The objective under the load: latency (p90: the median hides the requests that wait for
    others, a share the p90 counts) and requests per second relative to a
    yardstick (the default's figures), the terms the load does not change from verify."""
    weights: Weights
    fixed: dict[str, tuple[float, float, int]]
    percentile: float
    bound_ms: float

    def holds(self, f: LoadFigures) -> bool:
        return f.percentile(self.percentile) <= self.bound_ms

    def served(self, label: str, setting: Setting, f: LoadFigures, ref: LoadFigures) -> Served:
        memory, loss, changes = self.fixed.get(label, (0.0, 0.0, 0))
        latency_ratio = f.percentile(LATENCY_Q) / max(ref.percentile(LATENCY_Q), 1e-9)
        terms = self.weights.terms(latency_ratio, memory, loss, changes,
                                   throughput_ratio=ref.throughput_per_s / f.throughput_per_s)
        return Served(label, setting, f.as_dict(self.percentile), self.holds(f), sum(terms.values()), terms)

    @property
    def margin(self) -> float:
        """Loads served alike differ by LOAD_NOISE in requests/s and latency: that much of both weights."""
        return LOAD_NOISE * (self.weights.latency + self.weights.throughput)


def serve_verdict(serving, backend, default: onnx.ModelProto, plans: list[tuple[str, onnx.ModelProto]],
                  kept: str | None, feed: dict[str, np.ndarray], default_alone_ms: float,
                  server: LoadServer, weights: Weights | None = None,
                  fixed: dict[str, tuple[float, float, int]] | None = None, most_rows: int = 1,
                  predict: Predict | None = None, predicted_best: int = 2) -> ServingVerdict:
    """`plans`: the verified plans to serve beside the default, by label; `kept`: the one the
    latency decision kept (None: the default); `default_alone_ms`: the default's latency one
    request at a time (the bound's yardstick when serving.bound_ms is not given); `server`: how
    plans are served under load (verify/worker.serve_isolated); `weights`: the objective (None:
    requests per second alone); `fixed`: per label (the default's too) the terms the load does
    not change, as verified one request at a time: (peak memory ratio, accuracy loss, actions);
    `most_rows`: the most rows one call may take where requests can be combined (serving/batching.py);
    `predict`: the settings' loads predicted (decide/serve_predicted.py; None: every setting is
    served), of which the best `predicted_best` per plan are served.
    Every plan x setting is scored with its latency (p90) and requests per second under the
    load relative to the default's setting that serves most; each plan's best setting holds the
    bound first, then scores lowest. The plan served scores lowest: the kept plan unless
    another scores lower beyond noise, and no plan unless it scores no worse than the default
    beyond noise (a plan the latency decision did not keep must score better). A plan chosen
    over the default is confirmed: served again with the default alone (confirm_served); the
    default, where it is served, is served again alone (serve_alone). The served figures
    recorded are those of that second serving, in a process holding only what it serves."""
    import time

    t0 = time.perf_counter()
    weights = weights or Weights(0.0, 0.0, 0.0, throughput=1.0)
    v = ServingVerdict(serving.name, serving.cores, serving.concurrency, serving.request_threads,
                       serving.percentile, serving.bound(default_alone_ms),
                       weights={"latency": weights.latency, "throughput": weights.throughput})
    scoring = _Scoring(weights, fixed or {}, serving.percentile, v.bound_ms)
    models = [("default", default)] + list(plans)
    settings = {label: settings_for(m, serving.cores, serving.concurrency, most_rows) for label, m in models}
    if predict is not None:
        settings, v.predicted = _predicted_best(settings, predict, scoring, predicted_best)
    figures = server(backend, models, settings, feed, serving.concurrency, serving.duration_s)
    q = serving.percentile
    rows = [(label, setting, f) for label, _ in models for setting, f in zip(settings[label], figures[label])]
    served = [r for r in rows if r[2].error is None and r[2].requests > 0]
    # the yardstick: the default's setting serving most with the bound held (any plan's if it did not serve)
    ref = max((f for label, _, f in served if label == "default"), default=None,
              key=lambda f: (scoring.holds(f), f.throughput_per_s)) or \
        max((f for _, _, f in served), default=None, key=lambda f: (scoring.holds(f), f.throughput_per_s))
    best: dict[str, Served] = {}
    for label, setting, f in rows:
        entry = {"label": label, "setting": setting, "described": describe(setting), **f.as_dict(q)}
        if f.error is None and f.requests > 0:
            s = scoring.served(label, setting, f, ref)
            entry.update(holds_bound=s.holds_bound, score=s.score)
            if _better(s, best.get(label)):
                best[label] = s
        else:
            entry["holds_bound"] = False
        v.measured.append(entry)
    for p in v.predicted:       # the prediction beside what the load showed
        m = next((m for m in v.measured if m["label"] == p["label"] and m["setting"] == p["setting"]), None)
        if m is not None and not m["error"]:
            p.update(served_throughput_per_s=m["throughput_per_s"], served_p90_ms=m["p90_ms"])
    v.default = best.get("default")
    ranked = sorted((s for label, s in best.items() if label != "default"), key=lambda s: (not s.holds_bound, s.score))
    top, standing = (ranked[0] if ranked else None), best.get(kept) if kept else None
    if top is not None and standing is not None and top is not standing and \
            (standing.holds_bound or not top.holds_bound) and standing.score <= top.score + scoring.margin:
        top = standing          # the kept plan, confirmed one request at a time, scores as well within noise
    v.plan, v.keeps_plan, v.reason = _judged(v, top, kept, q, scoring.margin)
    if not any(s.holds_bound for s in best.values()):
        v.reason += (f" (no setting of any plan held the p{q:g} bound of {v.bound_ms:.4g} ms under this load: "
                     "the score decided)")
    if v.keeps_plan and v.default is not None:
        confirm_served(v, scoring, backend, dict(models), feed, server, serving, kept)
    elif v.plan is not None and not v.keeps_plan:
        serve_alone(v, scoring, backend, models[0][1], feed, server, serving)
    v.seconds = time.perf_counter() - t0
    return v


def _predicted_best(settings: dict[str, list[Setting]], predict: Predict, scoring: _Scoring, keep: int
                    ) -> tuple[dict[str, list[Setting]], list[dict[str, Any]]]:
    """(the settings to serve, each predicted one with its prediction): of a plan's settings the
    predictor scores, the `keep` that hold the bound first and score lowest, relative to the
    default's predicted setting serving most; the settings it does not score are all served."""
    guesses = {label: [(s, predict(label, s)) for s in offered] for label, offered in settings.items()}
    ref = max((p for _, p in guesses.get("default", []) if p is not None), default=None,
              key=lambda p: p.throughput_per_s)
    if ref is None:
        return settings, []
    out, rows = {}, []
    for label, pairs in guesses.items():
        scored = sorted((scoring.served(label, s, p, ref) for s, p in pairs if p is not None),
                        key=lambda x: (not x.holds_bound, x.score))
        best = [x.setting for x in scored[:keep]]
        out[label] = [s for s, p in pairs if p is None or s in best]
        rows += [{"label": label, "setting": x.setting, "described": describe(x.setting), **x.figures,
                  "predicted_score": x.score, "predicted_holds_bound": x.holds_bound, "served": x.setting in best}
                 for x in scored]
    return out, rows


CONFIRM_X = 2       # the confirmation serves the plan and the default each this many times serving.duration_s...
# ...split over this many fresh workers, one after another, pooled: one process's figure is one
# draw from a spread between processes (docs/decisions/2026-12-06-pooled-confirmation.md)
CONFIRM_PROCESSES = 3


def served_again(server: LoadServer, backend, models: list[tuple[str, onnx.ModelProto]],
                 settings: dict[str, list[Setting]], feed, serving) -> dict[str, LoadFigures]:
    """Each model at its one setting, served in CONFIRM_PROCESSES fresh workers one after
    another for CONFIRM_X times serving.duration_s in all, pooled: {label: the figures}; a
    worker's error is kept and ends the serving."""
    out = {label: LoadFigures() for label, _ in models}
    for _ in range(CONFIRM_PROCESSES):
        figures = server(backend, models, settings, feed, serving.concurrency,
                         serving.duration_s * CONFIRM_X / CONFIRM_PROCESSES)
        out = {label: out[label].merged(figures[label][0]) for label in out}
        if any(f.error for f in out.values()):
            break
    return out


def confirm_served(v: ServingVerdict, scoring: _Scoring, backend, models: dict[str, onnx.ModelProto], feed,
                   server: LoadServer, serving, kept: str | None) -> None:
    """The plan the load chose over the default, served again at its setting with the default at
    the default's, the two alone in fresh workers and longer (served_again): what the round
    measured beside the other plans must hold there, as a latency plan's must hold alone.
    `v` is changed in place: its confirmation, and the default served where it does not hold."""
    p, d, q = v.plan, v.default, scoring.percentile
    pair = [("default", models["default"]), (p.label, models[p.label])]
    figures = served_again(server, backend, pair, {"default": [d.setting], p.label: [p.setting]}, feed, serving)
    fd, fp = figures["default"], figures[p.label]
    error = next((f.error or "no request answered" for f in (fd, fp) if f.error or f.requests == 0), None)
    if error is None:
        cd, cp = scoring.served("default", d.setting, fd, fd), scoring.served(p.label, p.setting, fp, fd)
        standing = p.label == kept
        pays = (cp.holds_bound or not cd.holds_bound) and \
            cp.score <= cd.score + (scoring.margin if standing else -scoring.margin)
        v.confirmation = {"pays": pays, "seconds_each": serving.duration_s * CONFIRM_X, "processes": CONFIRM_PROCESSES,
                          "default": {**cd.figures, "score": cd.score}, "plan": {**cp.figures, "score": cp.score}}
        if pays:
            v.reason += (f"; confirmed served again alone with the default: {_words(cp, q)}, against the default's "
                         f"{_words(cd, q)}")
            v.plan.figures, v.default.figures = cp.figures, cd.figures     # what a process serving it sees
            return
        why = f"{_words(cp, q)}, against the default's {_words(cd, q)}"
        d.figures = cd.figures
    else:
        v.confirmation, why = {"pays": False, "error": error}, f"it failed: {error}"
    v.plan, v.keeps_plan = d, False
    v.reason = (f"{p.label} scored better under the load beside the other plans ({_words(p, q)}), but not when "
                f"served again alone with the default in fresh processes: {why}")


def serve_alone(v: ServingVerdict, scoring: _Scoring, backend, default: onnx.ModelProto, feed,
                server: LoadServer, serving) -> None:
    """The default, served (no plan beat it), served again at its setting alone in fresh workers
    (served_again): the figures plan.json claims are those of processes
    holding only what is deployed, not of the round beside the plans (changed in place; the
    round's figure stays where this one fails)."""
    d = v.plan
    f = served_again(server, backend, [("default", default)], {"default": [d.setting]}, feed, serving)["default"]
    if f.error or f.requests == 0:
        v.confirmation = {"alone": True, "error": f.error or "no request answered"}
        return
    alone = scoring.served("default", d.setting, f, f)
    v.confirmation = {"alone": True, "seconds_each": serving.duration_s * CONFIRM_X, "processes": CONFIRM_PROCESSES,
                      "default": {**alone.figures, "score": alone.score}}
    d.figures = alone.figures


def _judged(v: ServingVerdict, top: Served | None, kept: str | None, q: float, margin: float
            ) -> tuple[Served | None, bool, str]:
    """(the plan served, whether it is a plan rather than the default, why)."""
    d = v.default
    if d is None:
        return top, top is not None, "the default did not serve under the load"
    if top is None:
        return d, False, ("the default served best with " + _words(d, q) if kept is None else
                          f"the plan did not serve under the load ({_errors(v.measured, kept)})")
    if d.holds_bound and not top.holds_bound:
        return d, False, (f"under the load {top.label}'s p{q:g} misses the {v.bound_ms:.4g} ms bound "
                          f"({_words(top, q)}), the default's holds it ({_words(d, q)})")
    standing = top.label == kept
    if top.score > d.score + (margin if standing else -margin):
        return d, False, (f"under the load the default does {'better' if standing else 'as well'}: {_words(d, q)}, "
                          f"against {top.label}'s {_words(top, q)}")
    return top, True, (f"under the load {top.label} serves {top.throughput / d.throughput:.2f}x the default's "
                       f"requests: {_words(top, q)}, against the default's {_words(d, q)}")


def overrule(d, v: ServingVerdict, index: dict[str, int]) -> None:
    """The decision as the load left it (`d`: decide/stage's Decision, changed in place; `index`:
    candidate label -> its index): the default kept where no plan scores better under the load
    (its latency alone is the confirmation's), or another verified plan adopted where it does."""
    served = v.plan.label if v.plan is not None and v.keeps_plan else "default"
    kept = next((k for k, i in index.items() if i == d.chosen), None) if d.chosen is not None else None
    if served == (kept or "default"):
        return
    if kept is not None:      # plan.md names the chosen plan by its verdict's first word
        d.verdicts[kept] = f"not served under the load: {v.reason} (one request at a time: {d.verdicts.get(kept)})"
        d.default_alone = next((c for c in d.confirmations if c.pays and not c.error), d.default_alone)
    where = f"{v.concurrency} requests at once on {v.cores} cores"
    if served == "default":
        d.decision, d.chosen, d.basis = "rolled_back", None, ""
        d.reason = f"{kept} paid one request at a time, but not served as the deployment serves it ({where}): {v.reason}"
        return
    d.decision, d.chosen, d.basis = "adapted", index[served], "throughput"
    d.verdicts[served] = f"chosen under the load: {v.reason} (one request at a time: {d.verdicts.get(served)})"
    d.reason = (f"served as the deployment serves it ({where}), {v.reason}"
                + (f"; {kept}, kept one request at a time, scored worse under the load" if kept else ""))


def servable(c, max_loss: float, memory_limit: int) -> bool:
    """A verified candidate that may be served: it ran, within the accuracy bound (held out and at
    the range's points) and the memory limit."""
    worst = max(c.point_losses.values(), default=0.0)
    return c.ok and c.accuracy_loss <= max_loss and worst <= max_loss and c.peak_mem_bytes <= memory_limit


def to_serve(verified, kept: int | None, max_loss: float, memory_limit: int, path_of) -> list[int]:
    """The candidates served under load beside the default: the kept one, and on each execution
    path the servable one verify timed fastest (`path_of(i)`: candidate i's path label): the
    path that wins one request at a time is not always the one that wins under load."""
    out = [kept] if kept is not None else []
    fastest: dict[str, int] = {}
    for i, c in enumerate(verified.candidates):
        if servable(c, max_loss, memory_limit):
            p = path_of(i)
            if p not in fastest or c.latency_ms < verified.candidates[fastest[p]].latency_ms:
                fastest[p] = i
    return out + [i for i in fastest.values() if i != kept]


def serving_stage(s, backend, decision, verified, prepared, server: LoadServer | None, say, cost_model=None):
    """How the plan is served: (the verdict, the candidate served or None for the default). Under
    the deployment's load where several requests come at once and `server` can serve plans on
    the device (None: a modeled target, a remote one): the kept plan and each path's fastest
    servable candidate beside the default, the decision changed in place as the load leaves
    it; else as verified. `say`: progress lines; `cost_model`: the predictor (its kernel costs
    weigh the thread scaling where the fingerprint lacks a plan's kernel)."""
    chosen = lambda: verified.plans[decision.chosen] if decision.chosen is not None else None  # noqa: E731
    if not (s.serving.under_load and server is not None and verified.baseline.ok):
        return one_at_a_time(s.serving), chosen()
    alone = decision.default_alone or next((c for c in decision.confirmations if c.pays and not c.error), None)
    default_ms = alone.default_ms if alone is not None and not alone.error else verified.baseline.latency_ms
    served = to_serve(verified, decision.chosen, s.accuracy.max_loss, backend.info.memory_limit_bytes,
                      lambda i: ExecutionPath.of(verified.plans[i].model).label)
    plans = [(verified.candidates[i].label, verified.plans[i].model) for i in served]
    kept = verified.candidates[decision.chosen].label if decision.chosen is not None else None
    say(f"serve: {s.serving.concurrency} requests at once on {s.serving.cores} cores: the default"
        + "".join(f", {label}" for label, _ in plans) + f" with each serving setting ({s.serving.duration_s:g} s each)")
    weights = Weights.of(s.weights, under_load=True)
    base = verified.baseline
    base_mem = memory_base(base.peak_mem_bytes, backend.info.memory_limit_bytes, backend.info.memory_budget,
                           weights.memory_floor)
    fixed = {"default": (base.peak_mem_bytes / base_mem, 0.0, 0)} | {
        verified.candidates[i].label: (verified.candidates[i].peak_mem_bytes / base_mem,
                                       verified.candidates[i].accuracy_loss, verified.plans[i].changes) for i in served}
    most_rows = batch_rows(prepared.model, prepared.served.ranges, prepared.served.tuned) if prepared.served else 1
    alone = {"default": (prepared.model, default_ms)} | {
        verified.candidates[i].label: (verified.plans[i].model, verified.candidates[i].latency_ms) for i in served}
    predict, rests_on = stage_predictor(s, backend, alone, cost_model.predict_kernels_ms if cost_model else None)
    say(f"serve: {rests_on}")
    v = serve_verdict(s.serving, backend, prepared.model, plans, kept, prepared.feeds[0], default_ms, server,
                      weights, fixed, most_rows, predict, s.serving.predicted_best)
    for p in v.predicted:
        say(f"serve: predicted {p['label']} with {p['described']}: {p['predicted_throughput_per_s']:.4g}/s, "
            f"{p['predicted_latency_ms']:.4g} ms" + ("" if p["served"] else " (not served: others predicted better)"))
    q = f"p{v.percentile:g}_ms"
    for m in v.measured:
        say(f"serve: {m['label']} with {m['described']}: " + (m["error"] or (
            f"{m['throughput_per_s']:.4g}/s, p50 {m['p50_ms']:.4g} ms, p{v.percentile:g} {m[q]:.4g} ms, "
            f"score {m.get('score', float('nan')):.3f}"
            + ("" if m["holds_bound"] else f" (over the {v.bound_ms:.4g} ms bound)"))))
    say(f"serve: {v.reason}")
    overrule(decision, v, {verified.candidates[i].label: i for i in served})
    return v, chosen()


def _better(s: Served, other: Served | None) -> bool:
    """Holding the bound first, then the lower score."""
    return other is None or (s.holds_bound, -s.score) > (other.holds_bound, -other.score)


def _words(s: Served, q: float) -> str:
    return (f"{s.throughput:.4g}/s, p50 {s.figures.get('p50_ms', float('nan')):.4g} ms, "
            f"p{q:g} {s.figures.get(f'p{q:g}_ms', float('nan')):.4g} ms, score {s.score:.3f} ({describe(s.setting)})")


def _errors(measured: list[dict], label: str) -> str:
    return "; ".join(f"{m['described']}: {m['error']}" for m in measured if m["label"] == label and m["error"]) \
        or "no request answered"
