"""How the plan is served, in words: the terminal summary's line and plan.md's section (every
plan x serving setting measured under the deployment's load, requests per second and latency
percentiles, which one serves)."""
from __future__ import annotations

from typing import Any


def _threads(n: Any) -> str:
    return f"{n} thread{'s' if n != 1 else ''}"


def serving_line(plan: dict) -> str | None:
    """'serving: 2 requests at once on 2 cores: 412/s, p99 6.1 ms (2 sessions, 1 thread each)', or
    one request at a time; None for a plan.json without the record."""
    s = plan.get("serving")
    if not s:
        return None
    if (s.get("concurrency") or 1) <= 1:
        return f"serving: one request at a time, {_threads(s.get('request_threads'))} (serving={s.get('mode')})"
    served, q = s.get("plan") or {}, f"p{s.get('percentile', 99):g}"
    figures = (f"{served['throughput_per_s']:.4g}/s, {q} {served.get(f'{q}_ms', float('nan')):.4g} ms "
               f"({served.get('described')})" if served.get("throughput_per_s") else "not measured")
    bound = s.get("bound_ms")
    return (f"serving: {s['concurrency']} requests at once on {s.get('cores')} cores: {figures}"
            + (f"; {q} bound {bound:.4g} ms" if bound else ""))


def _weighed(w: dict) -> str:
    """How the score weighs the load (weights.latency x the p90, weights.throughput x the
    requests per second, each relative to the default's setting that serves most)."""
    if not w:
        return "Scored by requests per second."
    return (f"The score (lower is better) weighs the p90 latency by {w.get('latency', 0):g} and the requests "
            f"per second by {w.get('throughput', 0):g}, each relative to the default's setting that serves most, "
            "plus the memory, accuracy and change terms verified one request at a time.")


def serving_section(plan: dict) -> list[str]:
    """plan.md's lines (none at one request at a time)."""
    s = plan.get("serving")
    if not s or (s.get("concurrency") or 1) <= 1:
        return []
    q = f"p{s.get('percentile', 99):g}"
    out = ["## Served under load", "",
           f"{s['concurrency']} requests at once on {s.get('cores')} cores (closed loop: each client sends its next "
           f"request when answered), each plan with every serving setting its runtime offers, in a process of its "
           f"own. The {q} latency bound is {s.get('bound_ms', float('nan')):.4g} ms. {s.get('reason', '')}.", "",
           _weighed(s.get("weights") or {}), "",
           f"| plan | setting | requests/s | p50 ms | {q} ms | holds the bound | score |", "|---|---|---|---|---|---|---|"]
    for m in s.get("measured") or []:
        if m.get("error"):
            out.append(f"| {m['label']} | {m['described']} | failed: {m['error']} | | | | |")
            continue
        score = f"{m['score']:.3f}" if isinstance(m.get("score"), (int, float)) else ""
        out.append(f"| {m['label']} | {m['described']} | {m['throughput_per_s']:.4g} | {m['p50_ms']:.4g} | "
                   f"{m.get(f'{q}_ms', float('nan')):.4g} | {'yes' if m['holds_bound'] else 'no'} | {score} |")
    return out + [""] + _predicted(s.get("predicted") or []) + _confirmed(s.get("confirmation"), q)


def _predicted(rows: list[dict]) -> list[str]:
    """The sessions-and-threads settings scored before serving (decide/serve_predicted.py), with
    what the load then showed for those served."""
    if not rows:
        return []
    out = ["Predicted before serving (the fingerprint's thread scaling; the best per plan are served):", "",
           "| plan | setting | predicted requests/s | predicted ms | served | served requests/s |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        got = r.get("served_throughput_per_s")
        out.append(f"| {r['label']} | {r['described']} | {r['predicted_throughput_per_s']:.4g} | "
                   f"{r['predicted_latency_ms']:.4g} | {'yes' if r['served'] else 'no'} | "
                   f"{'' if got is None else f'{got:.4g}'} |")
    return out + [""]


def _pooled(c: dict, each: str = "") -> str:
    """'4 s each over 3 processes, pooled'."""
    n = c.get("processes") or 1
    return f"{c.get('seconds_each', 0):g} s{each}" + (f" over {n} processes, pooled" if n > 1 else "")


def _confirmed(c: dict | None, q: str) -> list[str]:
    """What is served, served again in fresh processes, pooled: the plan chosen over the default with
    the default, or the default alone."""
    if not c:
        return []
    if c.get("alone"):
        if c.get("error"):
            return [f"Served again alone in fresh processes, the default failed: {c['error']}.", ""]
        d = c["default"]
        return [f"The default, served again alone in fresh processes ({_pooled(c)}): "
                f"{d['throughput_per_s']:.4g}/s, {q} {d.get(f'{q}_ms', float('nan')):.4g} ms: the figures plan.json "
                "claims for it.", ""]
    if c.get("error"):
        return [f"Served again alone with the default, the plan failed: {c['error']}.", ""]
    p, d = c["plan"], c["default"]
    return [f"Served again alone with the default in fresh processes ({_pooled(c, ' each')}): the plan "
            f"{p['throughput_per_s']:.4g}/s, {q} {p.get(f'{q}_ms', float('nan')):.4g} ms, score {p['score']:.3f}; "
            f"the default {d['throughput_per_s']:.4g}/s, {q} {d.get(f'{q}_ms', float('nan')):.4g} ms, score "
            f"{d['score']:.3f}: {'holds' if c.get('pays') else 'does not hold, so the default is served'}.", ""]
