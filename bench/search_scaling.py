"""Search time against graph size: beam search (the default search's beam and depth, from
conf/search/default.yaml, and the default action space) on generated residual CNNs of about 100,
300 and 1000 nodes, on a modeled target.

    python -m bench.search_scaling [--target gpu] [--nodes 100 300 1000] [--beam N] [--depth N] [--budget 30]

Each model is profiled on the target and a predictor trained first (not timed); the search
time printed is beam_search's own wall time, with where it went. Prints one row per model, then
whether the largest graph of about 1000 nodes or more met the goal: within a search budget of
GOAL_S (--budget), the search reaches its configured depth and ends in time."""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import onnx
import yaml

from app.compose import target_backend
from metainfer_core.accuracy.metric import run_cpu
from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.fingerprint.profiler import profile
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.normalize import normalize
from metainfer_core.predictor import CostModel
from metainfer_core.search import Evaluator, Weights, beam_search
from metainfer_core.zoo._builder import GraphBuilder

ROOT = Path(__file__).resolve().parent.parent


def residual_cnn(n_nodes: int, channels: int = 16, size: int = 16, seed: int = 0) -> onnx.ModelProto:
    """Blocks of Conv3x3 -> Relu -> Conv1x1 -> Add(skip) -> Relu (5 nodes each), every fourth
    block downsampled with a strided 1x1 shortcut conv beside it, until about n_nodes nodes."""
    b = GraphBuilder(f"residual_cnn_{n_nodes}", seed)
    x = b.input("input", [channels, size, size])
    block = 0
    while len(b.nodes) + 6 <= n_nodes:
        stride = 2 if block % 4 == 3 and size > 4 else 1
        y = b.relu(b.conv(x, channels, channels, 3, stride, bias=True))
        y = b.conv(y, channels, channels, 1, bias=True, gain=0.5)
        skip = b.conv(x, channels, channels, 1, stride, bias=True) if stride == 2 else x
        size //= stride
        x = b.relu(b.op("Add", [y, skip]))
        block += 1
    return b.model({"output": x})


def search_defaults() -> dict:
    return yaml.safe_load((ROOT / "conf" / "search" / "default.yaml").read_text())


def space() -> dict:
    cfg = yaml.safe_load((ROOT / "conf" / "action_space" / "default.yaml").read_text())
    return {k: dict(v or {}) for k, v in cfg["actions"].items()}


def run(n_nodes: int, target: str, beam: int, depth: int, db_dir: str, budget_s: float = 600.0) -> dict:
    model = normalize(residual_cnn(n_nodes), {"input": [1, 16, 16, 16]}).model
    be = target_backend(target)
    feeds = [random_feeds(model, seed=i) for i in range(2)]
    reference = run_cpu(model, feeds)
    ctx = ActionContext(target=be.info, calibration_feeds=feeds)
    # the predictor learns from the graph and every action applied to it once (not timed)
    variants = [model]
    for name, domain in space().items():
        for params in ACTIONS[name].choices(domain):
            for site in ACTIONS[name].sites(model, params, be.info)[:1]:
                if ACTIONS[name].legal(model, site, params, be.info) is None:
                    try:
                        variants.append(ACTIONS[name].apply(model, site, params, ctx))
                    except Exception:  # noqa: BLE001
                        pass
    lib = FingerprintLibrary(f"sqlite:///{db_dir}/fp_{n_nodes}.db")
    rep = profile(be, lib, variants, [1], reps=3, warmup=0)
    cm = CostModel.train(lib.records(rep.fingerprint_version), rep.fingerprint_version)
    lossy = {n for n, a in ACTIONS.items() if a.lossy}
    ev = Evaluator(cm, be.info, Weights(1.0, 0.3, 1.0, 0.02), 0.01, feeds, reference, lossy, ctx=ctx)
    levels = []
    t0 = time.perf_counter()
    res = beam_search(model, space(), ev, ctx, beam_width=beam, depth=depth, top_k=3, time_budget_s=budget_s,
                      progress=lambda lvl, n, best: levels.append((lvl, n, round(time.perf_counter() - t0, 1))))
    return {"nodes": len(model.graph.node), "kernels_profiled": rep.measured, "search_s": res.search_s,
            "evaluated": res.evaluated, "duplicates": res.duplicates, "levels": res.levels, "depth": res.depth,
            "budget_hit": res.stopped_by_budget, "timings": res.timings,
            "best": " > ".join(s.kind for s in res.top[0].steps) if res.top else "-"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="gpu", choices=["gpu", "npu", "fpga", "asic"])
    ap.add_argument("--nodes", type=int, nargs="+", default=[100, 300, 1000])
    defaults = search_defaults()       # what a user's search runs with
    ap.add_argument("--beam", type=int, default=defaults["beam_width"])
    ap.add_argument("--depth", type=int, default=defaults["depth"])
    ap.add_argument("--budget", type=float, default=GOAL_S, help="the search's time budget (s)")
    ap.add_argument("--verbose", action="store_true", help="also print where the apply time went")
    a = ap.parse_args(argv)
    print(f"beam search scaling on {a.target} (modeled), beam {a.beam}, depth {a.depth}, budget {a.budget:g} s, "
          "default action space")
    print(f"{'nodes':>6} {'search_s':>9} {'candidates':>10} {'dups':>5} {'levels':>6}  time split")
    rows = []
    with tempfile.TemporaryDirectory(prefix="metainfer-bench-") as tmp:
        for n in a.nodes:
            r = run(n, a.target, a.beam, a.depth, tmp, a.budget)
            rows.append(r)
            t = r["timings"]
            split = ", ".join(f"{k.removesuffix('_s')} {t[k]:.1f}" for k in
                              ("expand_s", "apply_s", "hash_s", "evaluate_s", "sensitivity_s", "exact_s") if k in t)
            print(f"{r['nodes']:>6} {r['search_s']:>9.1f} {r['evaluated']:>10} {r['duplicates']:>5} {r['levels']:>6}  "
                  f"{split}{'  (time budget hit)' if r['budget_hit'] else ''}  best: {r['best']}", flush=True)
            if a.verbose:
                print(f"{'':>6} apply by action: {t.get('apply_by_action_s')}", flush=True)
    large = [r for r in rows if r["nodes"] >= GOAL_NODES * 0.95]
    if large:
        r = max(large, key=lambda r: r["nodes"])
        met = r["search_s"] <= GOAL_S and r["levels"] == r["depth"]
        print(f"goal: a {r['nodes']}-node graph searches in at most {GOAL_S:.0f} s, to its configured depth: "
              f"{'met' if met else 'MISSED'} ({r['search_s']:.1f} s, depth {r['levels']} of {r['depth']}, "
              f"{r['evaluated']} candidates scored)")
    return 0


GOAL_NODES, GOAL_S = 1000, 30.0


if __name__ == "__main__":
    sys.exit(main())
