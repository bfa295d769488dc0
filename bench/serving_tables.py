"""bench/serving_peers.py's verdicts and tables, pure functions of its rows: which peers count
(accuracy within the plan's bound, and under load its latency bound held), the best of them,
meta-infer against it (issue 51's done-when: at least 0.97, geo-mean above 1), and whether
fresh processes serving the plan alone with load_plan reproduce what plan.json claims (their
median within 5 %).

Under load (throughput) the figure compared is requests per second; one request at a time
(latency) it is the median latency, as verify judges it: the ratio is then best peer p50 /
meta-infer p50, so that above 1 means meta-infer is ahead in both modes."""
from __future__ import annotations

import math
import statistics
from typing import Any

from bench.labels import NAMES

GOAL = 0.97           # meta-infer at least this share of the best eligible peer's figure
REPRODUCES = 0.05     # the fresh process's figure within this of plan.json's claim


def q_key(row: dict) -> str:
    return f"p{row.get('percentile') or 99:g}_ms"


def served(cfg: dict) -> bool:
    return not cfg.get("error") and (cfg.get("requests") or 0) > 0


def holds_bound(cfg: dict, row: dict) -> bool | None:
    """Its latency percentile within plan.json's bound; None where the mode has no bound."""
    bound = row.get("bound_ms")
    if not bound or not served(cfg):
        return None
    return cfg.get(q_key(row), math.inf) <= bound


def eligible(cfg: dict, row: dict) -> bool:
    """A peer that counts: served, accuracy within the plan's bound, latency bound held."""
    loss, limit = cfg.get("accuracy_loss"), row.get("accuracy_bound")
    return (served(cfg) and cfg.get("peer") != "meta_infer" and loss is not None
            and (limit is None or loss <= limit) and holds_bound(cfg, row) is not False)


def figure(cfg: dict, mode: str) -> float | None:
    """What is compared: requests/s under load, the median latency (ms) one request at a time."""
    if not served(cfg):
        return None
    return cfg.get("throughput_per_s") if mode == "throughput" else cfg.get("p50_ms")


def ratio(plan: float | None, peer: float | None, mode: str) -> float | None:
    """meta-infer / best peer in requests/s, best peer / meta-infer in latency: above 1, meta-infer ahead."""
    if not plan or not peer:
        return None
    return plan / peer if mode == "throughput" else peer / plan


def claimed(row: dict) -> float | None:
    """plan.json's figure for the plan in the mode's unit: serving.plan's requests/s under load,
    else verify's median latency (measured, the baseline's where the default was kept)."""
    if row.get("mode") == "throughput":
        return row.get("claimed_throughput_per_s")
    return row.get("claimed_latency_ms")


def alone_figures(row: dict) -> list[float]:
    """The plan's figure in each fresh process that served it alone (row["alone"])."""
    mode = row.get("mode") or "throughput"
    return [f for f in (figure(c, mode) for c in row.get("alone") or []) if f]


def speedups_alone(row: dict) -> list[float]:
    """Requests/s of the plan over the default's, each fresh process's (where it served both)."""
    return [c["throughput_per_s"] / c["default"]["throughput_per_s"] for c in row.get("alone") or []
            if served(c) and served(c.get("default") or {}) and c["default"].get("throughput_per_s")]


def summary(row: dict) -> dict[str, Any]:
    """{model, mode, plan (its figure), plan_holds, best (label), best_figure, ratio, meets,
    claimed, fresh (the median of the plan served alone, else its figure beside the peers),
    fresh_vs_claimed (fresh / claimed - 1), reproduces, spread (the alone figures' max / min - 1),
    speedup_claimed (plan.json's plan / default requests/s), speedup_fresh (the median of the
    fresh processes' plan / default), speedup_reproduces, error}."""
    mode = row.get("mode") or "throughput"
    out: dict[str, Any] = {"model": row.get("model"), "mode": mode, "error": row.get("error")}
    configs = row.get("configs") or []
    mine = next((c for c in configs if c.get("peer") == "meta_infer"), None)
    if out["error"] or mine is None:
        return out | {"error": out["error"] or "meta-infer's plan was not served"}
    plan = figure(mine, mode)
    peers = [(c, figure(c, mode)) for c in configs if eligible(c, row)]
    best = (max if mode == "throughput" else min)(peers, key=lambda p: p[1], default=(None, None))
    r = ratio(plan, best[1], mode)
    claim = claimed(row)
    alone = sorted(alone_figures(row))
    fresh = statistics.median(alone) if alone else plan
    spread = alone[-1] / alone[0] - 1 if len(alone) > 1 else None
    vs = None if not fresh or not claim else fresh / claim - 1
    out |= {"plan": plan, "plan_holds": holds_bound(mine, row), "plan_error": mine.get("error"),
            "plan_loss": mine.get("accuracy_loss"), "best": best[0]["label"] if best[0] else None,
            "best_figure": best[1], "ratio": r, "meets": None if r is None else r >= GOAL, "claimed": claim,
            "fresh": fresh, "fresh_vs_claimed": vs, "reproduces": None if vs is None else abs(vs) <= REPRODUCES,
            "spread": spread}
    default = row.get("claimed_default_throughput_per_s")
    ups = speedups_alone(row)
    if ups and claim and default:
        up, up_claim = statistics.median(ups), claim / default
        out |= {"speedup_claimed": up_claim, "speedup_fresh": up,
                "speedup_reproduces": abs(up / up_claim - 1) <= REPRODUCES}
    return out


def geo_mean(values: list[float | None]) -> float | None:
    xs = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in xs) / len(xs)) if xs else None


def name(cfg: dict) -> str:
    """'ORT default, 2 sessions, 1 thread each' from its peer and setting."""
    from metainfer_core.serving.options import describe

    if cfg.get("peer") == "meta_infer":
        setting = (cfg.get("chose") or {}).get("setting")
        aa = cfg.get("aa_ratio")
        return (f"**meta-infer** (load_plan{': ' + describe(setting) if setting else ''}"
                f"{f'; opened first and last, pooled: first / last copy {aa:.3f}' if aa else ''})")
    return f"{NAMES.get(cfg.get('peer'), cfg.get('peer'))}, {describe(cfg.get('setting') or {})}"


def _num(x: float | None, fmt: str = "{:.4g}") -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)


def _yes(x: bool | None) -> str:
    return "–" if x is None else ("yes" if x else "**no**")


def model_table(row: dict) -> list[str]:
    """One model's configurations, side by side: requests/s, p50, the bound's percentile, the
    bound held, accuracy loss, counted as a peer; the plugin's choice where OpenVINO ran it."""
    q = q_key(row)
    bound = row.get("bound_ms")
    head = (f"**{row.get('model')}** ({row.get('mode')}: {row.get('concurrency')} request(s) at once on "
            f"{row.get('cores')} cores; plan: {row.get('decision')}, {row.get('execution_path')}; "
            f"accuracy bound {_num(row.get('accuracy_bound'))}"
            + (f"; {q[:-3]} bound {bound:.4g} ms" if bound else "") + ")")
    lines = [head, "", f"| configuration | requests/s | p50 ms | {q[:-3]} ms | {q[:-3]} within bound | accuracy loss "
             "| counted | OpenVINO's plugin chose |", "|---|---:|---:|---:|---|---:|---|---|"]
    for c in row.get("configs") or []:
        chose = c.get("chose") or {}
        picked = ", ".join(f"{k}={v}" for k, v in chose.items() if k != "setting")
        if c.get("error") and not served(c):
            lines.append(f"| {name(c)} | failed: {c['error'][:120]} | | | | | | |")
            continue
        counted = "(the plan)" if c.get("peer") == "meta_infer" else _yes(eligible(c, row))
        lines.append(f"| {name(c)} | {_num(c.get('throughput_per_s'), '{:.1f}')} | {_num(c.get('p50_ms'))} | "
                     f"{_num(c.get(q))} | {_yes(holds_bound(c, row))} | {_num(c.get('accuracy_loss'), '{:.2e}')} | "
                     f"{counted} | {picked} |")
    return lines


def summary_table(rows: list[dict]) -> list[str]:
    """Per model: meta-infer's figure, the best counted peer (which), the ratio and the goal, and
    plan.json's claim against the plan served alone in fresh processes (their median and
    spread); the geo-mean of the ratios last."""
    sums = [summary(r) for r in rows]
    mode = next((s["mode"] for s in sums), "throughput")
    unit = "requests/s" if mode == "throughput" else "p50 ms"
    lines = [f"| model | meta-infer {unit} | best counted peer | its {unit} | meta-infer / best peer | >= {GOAL:g} "
             f"| plan.json's {unit} | alone, fresh processes (median) | vs plan.json | within {REPRODUCES:.0%} "
             "| their spread |", "|---|---:|---|---:|---:|---|---:|---:|---:|---|---:|"]
    for s in sums:
        if s.get("error"):
            lines.append(f"| {s['model']} | failed: {str(s['error']).splitlines()[0][:160]} | | | | | | | | | |")
            continue
        plan = _num(s["plan"], "{:.1f}" if mode == "throughput" else "{:.4g}")
        if s.get("plan_holds") is False:
            plan += " (misses the latency bound)"
        lines.append(f"| {s['model']} | {plan} | {s['best'] or 'none counted'} | {_num(s['best_figure'])} | "
                     f"{_num(s['ratio'], '{:.3f}')} | {_yes(s['meets'])} | {_num(s['claimed'])} | "
                     f"{_num(s['fresh'])} | {_num(s['fresh_vs_claimed'], '{:+.1%}')} | {_yes(s['reproduces'])} | "
                     f"{_num(s['spread'], '{:.1%}')} |")
    ups = [s for s in sums if s.get("speedup_reproduces") is not None]
    if ups:
        lines += ["", "The plan's requests/s over the default's (each at its recorded setting, one after the other in "
                      "each fresh process), against plan.json's:", "",
                  f"| model | plan.json | fresh processes (median) | within {REPRODUCES:.0%} |", "|---|---:|---:|---|"]
        lines += [f"| {s['model']} | {s['speedup_claimed']:.3f}x | {s['speedup_fresh']:.3f}x | "
                  f"{_yes(s['speedup_reproduces'])} |" for s in ups]
    g = geo_mean([s.get("ratio") for s in sums])
    met = [s for s in sums if s.get("meets") is not None]
    checked = [s for s in sums if s.get("reproduces") is not None]
    lines += ["", f"**geo-mean meta-infer / best peer: {_num(g, '{:.3f}')}** over {len(met)} model(s); "
                  f"{sum(bool(s['meets']) for s in met)} of {len(met)} at least {GOAL:g}; "
                  f"served alone in fresh processes, median within {REPRODUCES:.0%} of plan.json: "
                  f"{sum(bool(s['reproduces']) for s in checked)} of {len(checked)}"
                  + (f"; the speed-up over the default within {REPRODUCES:.0%}: "
                     f"{sum(bool(s['speedup_reproduces']) for s in ups)} of {len(ups)}" if ups else "")]
    return lines
