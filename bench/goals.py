"""The goal arithmetic over the suite's results: each peer and meta-infer against ONNX Runtime's
default, the fastest peer within the accuracy bound, whether meta-infer meets the goal against it,
and the headline's geometric means. Plain functions of the results dict; bench/report.py renders
them."""
from __future__ import annotations

import math

from bench.labels import PEERS, PLANS


def ratio(a, b) -> float | None:
    return a / b if a and b else None


def gmean(xs) -> float | None:
    xs = [x for x in xs if x and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


GOAL = 0.97   # meta-infer at least as fast as the fastest peer within max_loss, within 3 %
# the peers, then meta-infer with the run's weights (the defaults: what a user runs) and with weights=latency
COLUMNS = (*PEERS[1:], *PLANS)


def base_ms(c: dict) -> float | None:
    return (c.get("ort_default") or {}).get("latency_ms")


def fastest_peer(c: dict, max_loss: float) -> tuple[str, float] | None:
    """(label, latency ms) of the fastest peer (meta-infer excluded) whose accuracy loss is within
    max_loss, or None when none ran within it."""
    ok = [(v["latency_ms"], k) for k in PEERS if (v := c.get(k) or {}).get("latency_ms") and not v.get("error")
          and v.get("accuracy_loss") is not None and v["accuracy_loss"] <= max_loss]
    return (min(ok)[1], min(ok)[0]) if ok else None


def compare_ratios(m: dict, max_loss: float) -> dict[str, float | None]:
    """One model's ratio columns: each peer and meta-infer against ORT default, the ORT default
    copies' A/A, the fastest peer within max_loss against ORT default, meta-infer against it."""
    c = m.get("compare") or {}
    base = base_ms(c)
    out = {k: ratio(base, (c.get(k) or {}).get("latency_ms")) for k in COLUMNS}
    out["aa"] = (c.get("ort_default") or {}).get("aa")
    best = fastest_peer(c, max_loss)
    out["fastest"] = ratio(base, best[1]) if best else None
    for k, mine in (("vs_fastest", "meta_infer"), ("vs_fastest_latency", "meta_infer_latency")):
        out[k] = ratio(best[1], (c.get(mine) or {}).get("latency_ms")) if best else None
    return out


def goal(m: dict, max_loss: float) -> str:
    """The 3 % goal on one model: 'yes' (meta-infer within max_loss and at least GOAL times the
    fastest peer within it: its latency / meta-infer's >= 0.97), 'below', 'over max_loss' (meta-
    infer's plan itself lost more), 'failed' (adapt, comparison or meta-infer's run failed), or
    '–' (not compared: --skip compare)."""
    c = m.get("compare") or {}
    if m.get("error") or m.get("compare_error"):
        return "failed"
    if not c:
        return "–"
    mi = c.get("meta_infer") or {}
    if mi.get("error") or not mi.get("latency_ms"):
        return "failed"
    if (mi.get("accuracy_loss") or 0) > max_loss:
        return "over max_loss"
    r = compare_ratios(m, max_loss)["vs_fastest"]
    return "yes" if r is None or r >= GOAL else "below"


def goal_summary(models: list[dict], max_loss: float) -> dict:
    """{met, total (models compared or failed), below: [(name, ratio)], other: [(name, status)]}."""
    status = [(m["name"], goal(m, max_loss), compare_ratios(m, max_loss)["vs_fastest"]) for m in models]
    counted = [s for s in status if s[1] != "–"]
    return {"met": sum(1 for s in counted if s[1] == "yes"), "total": len(counted),
            "below": [(n, r) for n, g, r in counted if g == "below"],
            "other": [(n, g) for n, g, _ in counted if g not in ("yes", "below")]}


def max_loss(results: dict) -> float:
    return float((results.get("options") or {}).get("max_loss") or 0.01)


def headline(results: dict) -> dict:
    """Geometric means over the models that ran: adapted vs default (adapt's verify), each peer
    and meta-infer vs ORT default (same comparison run), the fastest peer within max_loss and
    meta-infer against it, plus the median distance to the roofline and the 3 % goal's count."""
    ok = [m for m in results["models"] if not m.get("error")]
    lat = [m["latency"] for m in ok if m.get("latency") and not m["latency"].get("error")]
    out = {"models": len(ok), "failed": len(results["models"]) - len(ok),
           "adapted": sum(1 for m in ok if m["decision"] == "adapted"),
           "speedup_gmean": gmean([ratio(m["default_ms"], m["adapted_ms"]) for m in ok]),
           "latency_models": len(lat), "latency_adapted": sum(1 for m in lat if m["decision"] == "adapted"),
           "speedup_latency_gmean": gmean([ratio(m["default_ms"], m["adapted_ms"]) for m in lat])}
    ratios = [compare_ratios(m, max_loss(results)) for m in ok if m.get("compare") and not m.get("compare_error")]
    for k in (*COLUMNS, "aa", "fastest", "vs_fastest", "vs_fastest_latency"):
        out[f"{k}_gmean"] = gmean([r[k] for r in ratios])
    xs = sorted(m["roofline"]["x_limit"] for m in ok if m.get("roofline"))
    out["roofline_x_median"] = xs[len(xs) // 2] if xs else None
    g = goal_summary(results["models"], max_loss(results))
    out["goal_met"], out["goal_models"] = g["met"], g["total"]
    return out
