"""The serving verdict (serving.concurrency > 1): the plan the latency decision kept and the
default are each served under the deployment's load with every serving setting their runtime
offers (serving/measure.py, in a process of its own); each one's best setting is the one with
the most requests per second whose latency percentile holds the bound. The plan is served only
if it serves at least as many requests as the default beyond noise allows; else the default is
(a plan that wins one request at a time can lose under load: memory-bound, or a runtime's
threads oversubscribing the cores). With one request at a time there is nothing to choose: the
setting is one session at the serving threads, and nothing is measured again."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import onnx

from metainfer_core.serving.load import LoadFigures
from metainfer_core.serving.measure import settings_for
from metainfer_core.serving.options import Setting, describe

LOAD_NOISE = 0.03       # the plan must serve at least this share fewer requests than the default to lose to it

# (backend, [(label, model)], {label: settings}, feed, concurrency, duration_s) -> {label: [LoadFigures]}
LoadServer = Callable[..., dict[str, list[LoadFigures]]]


@dataclass
class Served:
    """One plan's best setting under the load, or why none held the bound."""
    label: str
    setting: Setting
    figures: dict[str, Any]
    holds_bound: bool

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
    seconds: float = 0.0

    def record(self) -> dict[str, Any]:
        """plan.json's `serving`."""
        def served(s: Served | None) -> dict | None:
            return None if s is None else {"label": s.label, "setting": s.setting, "described": describe(s.setting),
                                           "holds_bound": s.holds_bound, **s.figures}
        return {"mode": self.mode, "cores": self.cores, "concurrency": self.concurrency,
                "request_threads": self.request_threads, "percentile": self.percentile, "bound_ms": self.bound_ms,
                "setting": self.plan.setting if self.plan else {"sessions": 1, "intra_op_threads": self.request_threads},
                "plan": served(self.plan), "default": served(self.default), "keeps_plan": self.keeps_plan,
                "reason": self.reason, "measured": self.measured, "seconds": self.seconds}


def one_at_a_time(serving) -> ServingVerdict:
    """serving=latency at one request: the setting is the one latency verify measured."""
    return ServingVerdict(serving.name, serving.cores, 1, serving.request_threads,
                          reason="one request at a time: served as verified (one session, "
                                 f"{serving.request_threads} thread{'s' if serving.request_threads != 1 else ''})")


def serve_verdict(serving, backend, default: onnx.ModelProto, plan: onnx.ModelProto | None, plan_label: str,
                  feed: dict[str, np.ndarray], default_alone_ms: float, server: LoadServer) -> ServingVerdict:
    """`plan`: the one the latency decision kept (None: the default); `default_alone_ms`: the
    default's latency one request at a time (the bound's yardstick when serving.bound_ms is
    not given); `server`: how plans are served under load (verify/worker.serve_isolated)."""
    import time

    t0 = time.perf_counter()
    v = ServingVerdict(serving.name, serving.cores, serving.concurrency, serving.request_threads,
                       serving.percentile, serving.bound_ms or serving.bound_x * default_alone_ms)
    models = [("default", default)] + ([(plan_label, plan)] if plan is not None else [])
    settings = {label: settings_for(m, serving.cores, serving.concurrency) for label, m in models}
    figures = server(backend, models, settings, feed, serving.concurrency, serving.duration_s)
    q = serving.percentile
    best: dict[str, Served] = {}
    for label, _ in models:
        for setting, f in zip(settings[label], figures[label]):
            row = f.as_dict(q)
            holds = f.error is None and f.requests > 0 and f.percentile(q) <= v.bound_ms
            v.measured.append({"label": label, "setting": setting, "described": describe(setting),
                               "holds_bound": holds, **row})
            s = Served(label, setting, row, holds)
            if f.error is None and f.requests > 0 and _better(s, best.get(label)):
                best[label] = s
    v.default = best.get("default")
    v.plan = best.get(plan_label) if plan is not None else v.default
    v.seconds = time.perf_counter() - t0
    if v.default is None:
        v.keeps_plan, v.reason = plan is not None and v.plan is not None, "the default did not serve under the load"
    elif plan is None:
        v.reason = f"the default served best with {_words(v.default, q)}"
    elif v.plan is None:
        v.keeps_plan, v.reason = False, f"the plan did not serve under the load ({_errors(v.measured, plan_label)})"
    elif v.default.holds_bound and not v.plan.holds_bound:
        v.keeps_plan, v.reason = False, (f"under the load the plan's p{q:g} misses the {v.bound_ms:.4g} ms bound "
                                         f"({_words(v.plan, q)}), the default's holds it ({_words(v.default, q)})")
    elif v.plan.throughput < v.default.throughput * (1 - LOAD_NOISE):
        v.keeps_plan, v.reason = False, (f"under the load the default serves more: {_words(v.default, q)}, against "
                                         f"the plan's {_words(v.plan, q)}")
    else:
        v.reason = (f"under the load the plan serves {v.plan.throughput / v.default.throughput:.2f}x the default's "
                    f"requests: {_words(v.plan, q)}, against the default's {_words(v.default, q)}")
    if not v.keeps_plan:
        v.plan = v.default
    return v


def overrule(d, v: ServingVerdict) -> None:
    """A plan that paid one request at a time but not under the load: the default is kept
    (`d`: decide/stage's Decision, changed in place); its latency alone is the confirmation's."""
    if v.keeps_plan or d.chosen is None:
        return
    label = v.measured[-1]["label"] if v.measured else "the plan"
    d.verdicts[label] = d.verdicts.get(label, "") + f"; not kept under the load: {v.reason}"
    d.default_alone = next((c for c in d.confirmations if c.pays and not c.error), d.default_alone)
    d.decision, d.chosen, d.basis = "rolled_back", None, ""
    d.reason = (f"{label} paid one request at a time, but not served as the deployment serves it "
                f"({v.concurrency} requests at once on {v.cores} cores): {v.reason}")


def serving_stage(s, backend, decision, chosen, prepared, verified, server: LoadServer | None, say) -> ServingVerdict:
    """How the plan is served: under the deployment's load where several requests come at once
    and `server` can serve plans on the device (None: a modeled target, a remote one), the
    decision overruled in place where the plan loses there; else as verified. `chosen`: the
    search candidate decide kept (None: the default); `say`: progress lines."""
    if not (s.serving.under_load and server is not None and verified.baseline.ok):
        return one_at_a_time(s.serving)
    alone = decision.default_alone or next((c for c in decision.confirmations if c.pays and not c.error), None)
    default_ms = alone.default_ms if alone is not None and not alone.error else verified.baseline.latency_ms
    plan = chosen.model if chosen is not None else None
    label = verified.candidates[decision.chosen].label if decision.chosen is not None else "default"
    say(f"serve: {s.serving.concurrency} requests at once on {s.serving.cores} cores: "
        f"{'the plan and ' if plan is not None else ''}the default with each serving setting "
        f"({s.serving.duration_s:g} s each)")
    v = serve_verdict(s.serving, backend, prepared.model, plan, label, prepared.feeds[0], default_ms, server)
    q = f"p{v.percentile:g}_ms"
    for m in v.measured:
        say(f"serve: {m['label']} with {m['described']}: " + (m["error"] or (
            f"{m['throughput_per_s']:.4g}/s, p50 {m['p50_ms']:.4g} ms, p{v.percentile:g} {m[q]:.4g} ms"
            + ("" if m["holds_bound"] else f" (over the {v.bound_ms:.4g} ms bound)"))))
    say(f"serve: {v.reason}")
    overrule(decision, v)
    return v


def _better(s: Served, other: Served | None) -> bool:
    """Holding the bound first, then more requests per second."""
    return other is None or (s.holds_bound, s.throughput) > (other.holds_bound, other.throughput)


def _words(s: Served, q: float) -> str:
    return (f"{s.throughput:.4g}/s, p{q:g} {s.figures.get(f'p{q:g}_ms', float('nan')):.4g} ms "
            f"({describe(s.setting)})")


def _errors(measured: list[dict], label: str) -> str:
    return "; ".join(f"{m['described']}: {m['error']}" for m in measured if m["label"] == label and m["error"]) \
        or "no request answered"
