"""How well adapt's cost model ranked and sized the plans verify then measured, on real models:
per model and per execution path, from the plan.json files of adapt runs (the suite's, or any
store's runs/ folder). For each model only its first adapt counts: the fingerprint library had
never seen that model (a store adapting the corpus in order holds 0, 1, 2, ... other models then,
which is the learning curve).

Per model: verified plans, Spearman between predicted and measured latency among them (3 plans
or more), median and p90 of |predicted / measured - 1| over the plans, the default plan's
error, and how many plans were off by more than 2x (adapt's warning). Then per execution path
(onnxruntime, openvino:f32, ...) over all models, latency and peak memory (the runtime's
footprint included: measured in a fresh process), and the mean Spearman. Then the learning
curve: the same figures over the models adapted with none, 1-3, 4-9 and 10 or more other
models in the library.

    python -m bench.plan_predictions RUNS_DIR [--weights balanced]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

OFF = 2.0          # run_warnings.PREDICTOR_OFF: adapt warns past this factor either way


def first_adapts(plans: list[dict], weights: str | None = None) -> list[dict]:
    """Each model's first plan (in the given order) among those with `weights` (any when None)."""
    seen, out = set(), []
    for p in plans:
        key = p["model"].get("sha256") or p["model"]["name"]
        if key in seen or (weights and (p.get("weights") or {}).get("name") != weights):
            continue
        seen.add(key)
        out.append(p)
    return out


def _error(pred, meas) -> float | None:
    return abs(pred / meas - 1) if pred and meas and pred > 0 and meas > 0 else None


def _points(p: dict, predicted: str, measured: str) -> list[tuple[str, float, float]]:
    """(execution path, predicted, measured) of the default and every verified plan that ran, for
    one figure (`predicted`: the plan's key, `measured`: the measurement's)."""
    base = p["baseline"]      # the unchanged model on the default path
    pts = [("onnxruntime", base.get(predicted), base.get(measured))]
    pts += [(c.get("execution_path") or "onnxruntime", c.get(predicted), (c.get("measured") or {}).get(measured))
            for c in p.get("candidates") or [] if not c.get("error")]
    return [(path, pr, me) for path, pr, me in pts if _error(pr, me) is not None]


def plan_points(p: dict) -> list[tuple[str, float, float]]:
    """Latency (ms) of the default and every verified plan that ran."""
    return _points(p, "predicted_latency_ms", "latency_ms")


def memory_points(p: dict) -> list[tuple[str, float, float]]:
    """Peak memory (bytes) of the same plans."""
    return _points(p, "predicted_peak_mem_bytes", "peak_mem_bytes")


def model_figures(p: dict, seen_before: int) -> dict:
    pts = plan_points(p)
    errs = [_error(pr, me) for _, pr, me in pts]
    rho = None
    if len(pts) >= 3:
        r = spearmanr([pr for _, pr, _ in pts], [me for _, _, me in pts]).statistic
        rho = None if math.isnan(r) else float(r)
    base = p["baseline"]
    return {"model": p["model"]["name"], "seen_before": seen_before, "plans": len(pts), "spearman": rho,
            "median_err": float(np.median(errs)) if errs else None,
            "p90_err": float(np.percentile(errs, 90)) if errs else None,
            "default_err": _error(base.get("predicted_latency_ms"), base.get("latency_ms")),
            "off_2x": sum(1 for _, pr, me in pts if max(pr / me, me / pr) > OFF),
            "points": pts, "memory_points": memory_points(p)}


def figures(plans: list[dict]) -> dict:
    """{models: [model_figures], paths: {path: {plans, median_err, p90_err, memory_median_err,
    memory_p90_err}}, mean_spearman, median_err, p90_err}."""
    models = [model_figures(p, i) for i, p in enumerate(plans)]
    by_path: dict[str, list[float]] = {}
    memory: dict[str, list[float]] = {}
    for m in models:
        for path, pr, me in m["points"]:
            by_path.setdefault(path, []).append(_error(pr, me))
        for path, pr, me in m["memory_points"]:
            memory.setdefault(path, []).append(_error(pr, me))
    every = [e for errs in by_path.values() for e in errs]
    rhos = [m["spearman"] for m in models if m["spearman"] is not None]

    def spread(errs: list[float] | None, key: str) -> dict:
        return {f"{key}median_err": float(np.median(errs)) if errs else None,
                f"{key}p90_err": float(np.percentile(errs, 90)) if errs else None}

    return {"models": models,
            "paths": {k: {"plans": len(v), **spread(v, ""), **spread(memory.get(k), "memory_")}
                      for k, v in sorted(by_path.items())},
            "learning": learning_curve(models),
            "mean_spearman": float(np.mean(rhos)) if rhos else None,
            "median_err": float(np.median(every)) if every else None,
            "p90_err": float(np.percentile(every, 90)) if every else None}


LIBRARY_SIZES = ((0, 0), (1, 3), (4, 9), (10, None))     # other models in the library before


def learning_curve(models: list[dict]) -> list[dict]:
    """Per band of LIBRARY_SIZES that holds models: {band, models, mean_spearman, median_err,
    p90_err (over their plans), default_median_err}."""
    out = []
    for lo, hi in LIBRARY_SIZES:
        ms = [m for m in models if m["seen_before"] >= lo and (hi is None or m["seen_before"] <= hi)]
        if not ms:
            continue
        errs = [_error(pr, me) for m in ms for _, pr, me in m["points"]]
        rhos = [m["spearman"] for m in ms if m["spearman"] is not None]
        defaults = [m["default_err"] for m in ms if m["default_err"] is not None]
        out.append({"band": f"{lo}" if hi == lo else f"{lo}+" if hi is None else f"{lo}-{hi}", "models": len(ms),
                    "mean_spearman": float(np.mean(rhos)) if rhos else None,
                    "median_err": float(np.median(errs)) if errs else None,
                    "p90_err": float(np.percentile(errs, 90)) if errs else None,
                    "default_median_err": float(np.median(defaults)) if defaults else None})
    return out


def _pct(x) -> str:
    return "–" if x is None else f"{x:.0%}"


def markdown(f: dict) -> list[str]:
    out = ["| model | other models in the library before | plans | Spearman | median error | p90 error | default's error | off > 2x |",
           "|---|---|---|---|---|---|---|---|"]
    for m in f["models"]:
        out.append(f"| {m['model']} | {m['seen_before']} | {m['plans']} | "
                   f"{'–' if m['spearman'] is None else format(m['spearman'], '.2f')} | {_pct(m['median_err'])} | "
                   f"{_pct(m['p90_err'])} | {_pct(m['default_err'])} | {m['off_2x']} |")
    out += ["", "| execution path | plans | median error | p90 error | peak memory: median error | p90 error |",
            "|---|---|---|---|---|---|"]
    out += [f"| {k} | {v['plans']} | {_pct(v['median_err'])} | {_pct(v['p90_err'])} | "
            f"{_pct(v.get('memory_median_err'))} | {_pct(v.get('memory_p90_err'))} |" for k, v in f["paths"].items()]
    out += ["", "| other models in the library before | models | mean Spearman | median error | p90 error "
                "| default's median error |", "|---|---|---|---|---|---|"]
    out += [f"| {b['band']} | {b['models']} | {'–' if b['mean_spearman'] is None else format(b['mean_spearman'], '.2f')} "
            f"| {_pct(b['median_err'])} | {_pct(b['p90_err'])} | {_pct(b['default_median_err'])} |"
            for b in f.get("learning", [])]
    rho = f["mean_spearman"]
    out += ["", f"Mean Spearman {'–' if rho is None else format(rho, '.2f')}, median error {_pct(f['median_err'])}, "
                f"p90 {_pct(f['p90_err'])}, {sum(m['off_2x'] > 0 for m in f['models'])} of {len(f['models'])} "
                f"models with a plan off by more than {OFF:g}x."]
    return out


def load_runs(runs: Path) -> list[dict]:
    """The plan.json of every run folder under `runs`, oldest first (folder names start with the time)."""
    return [json.loads(p.read_text()) for p in sorted(runs.glob("*/plan.json"))]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, help="a store's runs/ folder (paths.artifacts/runs)")
    ap.add_argument("--weights", default="balanced", help="only runs with these weights (the defaults: balanced)")
    a = ap.parse_args(argv)
    plans = first_adapts(load_runs(a.runs), a.weights)
    if not plans:
        print(f"no adapt runs with weights={a.weights} under {a.runs}", file=sys.stderr)
        return 1
    print("\n".join(markdown(figures(plans))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
