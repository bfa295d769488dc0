"""Does an adapt's claimed speed-up hold outside the adapt (issue 47)? One run folder's plan and its
default, timed again in a fresh Python process that loads nothing but what runs them.

The child (`python -m bench.clean_check --child ...`, started by clean_check()) imports numpy,
onnx, onnxruntime and metainfer_core.plan.deployable (plus the backend and timing modules those
need; never Prefect, Hydra, MLflow or the bench's peers), then compiles:

- the default: the run folder's `default.onnx` on ONNX Runtime with the settings of the target's
  default path as the adapt ran it (plan.json `target.driver`: providers, intra-op threads, graph
  optimisation level; metainfer_core.backends.ort_backend.OrtBackend's session options), and
- the plan: `load_plan(run_folder)`, its execution path with the verified settings.

Both are warmed (each at least WARM_RUNS runs and WARM_S seconds, alternating), then timed
alternating for `rounds` rounds with verify's method (metainfer_core.backends.timing.interleaved:
round r starts at graph r % 2, so the order swaps every round, ABBAAB..., and each timed run
follows its settle runs) on one input: the first sample of the run's inputs (the data.inputs
.npz the adapt got, as adapt reads it; without one, the seeded random inputs adapt draws,
random_feeds(default, seed)). It prints one JSON line with the raw samples; the parent computes
the figures (medians, the paired ratio and its bootstrap bounds: metainfer_core.decide.stage's
ratio_bounds, the statistic the decision used) against plan.json's claims.

A rolled-back, default or skipped run times its plan (the default itself, through load_plan)
beside default.onnx all the same: its clean figure is the default's, and the pair's ratio is an
A/A noise figure (the noise bound a second adapt's decision is judged against, bench/adapt_corpus.py
--twice).

    python -m bench.clean_check RUN_FOLDER [--rounds N] [--inputs NPZ] [--seed S] [--json]
"""
from __future__ import annotations

# this module is the child's __main__: nothing heavy at module level (the parent's imports are in
# its functions), so the child loads only what _child() imports
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = 300          # alternating timed rounds (each graph once per round), all processes together
PROCESSES = 5         # fresh processes, one after another, each timing ROUNDS / PROCESSES; pooled
MAX_S = 90.0          # ...but no round begun past this many seconds of timing (a slow model), once
MIN_ROUNDS = 30       # ...this many are done
WARM_RUNS, WARM_S = 20, 0.3     # warm-up per graph: at least this many runs and this long
HOLDS = 0.03          # the clean speed-up reproduces the claim within 3 %
LOSSY = 1e-4          # accuracy loss above this: a lossy plan...
LOSSY_MIN = 1.03      # ...is adopted only where its clean speed-up is at least this
DEFAULT_WITHIN = 0.10  # plan.json's default latency within 10 % of the clean one
CHILD_TIMEOUT_S = 900.0
# modules the child must not load: what adapt runs in (and the bench's peers) but a deployment does not
HEAVY = ("prefect", "hydra", "mlflow", "torch", "nncf", "catboost", "bench.peers", "tasks", "app")


# ---------------------------------------------------------------------------------------------- the child

def _child(run: Path, feeds_npz: Path, settings: dict[str, Any], rounds: int, max_s: float) -> dict[str, Any]:
    """The fresh process's work: compile both, warm both, time them alternating; raw samples."""
    import numpy as np
    import onnx

    from metainfer_core.backends.ort_backend import OrtBackend
    from metainfer_core.backends.timing import SETTLE, interleaved
    from metainfer_core.plan.deployable import load_plan

    with np.load(feeds_npz, allow_pickle=False) as z:
        feeds = {k: z[k] for k in z.files}
    t0 = time.perf_counter()
    default_model = onnx.load(str(run / "default.onnx"))
    inits = {i.name for i in default_model.graph.initializer}
    default_inputs = [i.name for i in default_model.graph.input if i.name not in inits]
    default = OrtBackend("clean-default", "measured", {"memory_limit_bytes": 0, **settings}).compile(default_model)
    default_compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    plan = load_plan(run)
    plan_compile_s = time.perf_counter() - t0
    missing = [k for k in [*default_inputs, *plan.inputs] if k not in feeds]
    if missing:
        raise ValueError(f"the inputs lack {sorted(set(missing))} (they hold {sorted(feeds)})")
    df = {k: feeds[k] for k in default_inputs}
    pf = {k: feeds[k] for k in plan.inputs}
    graphs, fs = [default, plan.compiled], [df, pf]
    warm = [0, 0]
    t_end = time.perf_counter() + WARM_S
    while min(warm) < WARM_RUNS or time.perf_counter() < t_end:     # warm both, alternating
        for i, (c, f) in enumerate(zip(graphs, fs)):
            c.run(f)
            warm[i] += 1
        if min(warm) >= 3 and time.perf_counter() > t_end + 10 * WARM_S:   # a slow graph: enough
            break
    t0 = time.perf_counter()
    samples = interleaved(graphs, fs, rounds, SETTLE, deadline=t0 + max_s, min_rounds=min(rounds, MIN_ROUNDS))
    loaded = sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in HEAVY))
    return {"pid": os.getpid(), "default_samples_ms": samples[0], "plan_samples_ms": samples[1],
            "rounds": len(samples[0]), "timing_s": time.perf_counter() - t0, "warm_runs": warm,
            "default_compile_s": default_compile_s, "plan_compile_s": plan_compile_s,
            "plan_path": plan.path.get("label"), "default_settings": settings, "heavy_modules": loaded,
            "modules": len(sys.modules)}


def _child_main(argv: list[str]) -> int:
    args = dict(zip(argv[::2], argv[1::2]))
    try:
        out = _child(Path(args["--run"]), Path(args["--feeds"]), json.loads(args["--settings"]),
                     int(args["--rounds"]), float(args["--max-s"]))
    except Exception as exc:  # noqa: BLE001 - the parent reports it as the row's error
        out = {"pid": os.getpid(), "error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.flush()
    print(json.dumps(out), flush=True)
    return 0


# ---------------------------------------------------------------------------------------------- the parent

def child_answer(proc: subprocess.CompletedProcess) -> dict | None:
    """A bench child's answer: the last JSON line it printed (a runtime may print before it)."""
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def last_words(proc: subprocess.CompletedProcess) -> str:
    return " / ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])


def default_settings(plan: dict) -> dict[str, Any]:
    """The target's default-path settings as the adapt ran it: plan.json's `target.driver`
    ('providers=CPUExecutionProvider;threads=1;opt=ORT_ENABLE_ALL', OrtBackend.info), else
    conf/target/cpu.yaml's (CPU provider, 1 intra-op thread, ORT_ENABLE_ALL)."""
    out: dict[str, Any] = {"providers": ["CPUExecutionProvider"], "intra_op_threads": 1,
                           "graph_optimization_level": "ORT_ENABLE_ALL"}
    driver = (plan.get("target") or {}).get("driver") or ""
    parts = dict(p.split("=", 1) for p in driver.split(";") if "=" in p)
    if parts.get("providers"):
        out["providers"] = parts["providers"].split(",")
    if parts.get("threads", "").isdigit():
        out["intra_op_threads"] = int(parts["threads"])
    if parts.get("opt"):
        out["graph_optimization_level"] = parts["opt"]
    return out


def first_feed(run_folder: Path, feeds=None, seed: int = 0) -> dict:
    """The one input the check times: `feeds` (a feed dict, a list of them: the first, or a
    data.inputs .npz path: its first sample as adapt reads it), else adapt's first random input
    (random_feeds(default.onnx, seed))."""
    import onnx

    if isinstance(feeds, dict):
        return feeds
    if isinstance(feeds, (list, tuple)):
        return feeds[0]
    model = onnx.load(str(run_folder / "default.onnx"), load_external_data=False)
    if feeds is not None:
        from metainfer_core.normalize.inputs import load_samples, sample_feeds

        return sample_feeds(model, load_samples(str(feeds)), str(feeds), "labels")[0][0]
    from metainfer_core.ir.tensors import random_feeds

    return random_feeds(model, seed=seed)


def claims(plan: dict) -> dict[str, Any]:
    """What plan.json says: decision, chosen plan (path, action kinds, lossy?), the claimed
    speed-up (baseline / measured latency, verify's figures) and default latency."""
    base, meas = plan.get("baseline") or {}, plan.get("measured") or {}
    b, m = base.get("latency_ms"), meas.get("latency_ms")
    loss = meas.get("accuracy_loss")
    return {"decision": plan.get("decision"), "adopted": plan.get("decision") == "adapted",
            "execution_path": (plan.get("execution_path") or {}).get("label") or "onnxruntime",
            "actions": [a.get("kind") for a in plan.get("actions") or []],
            "accuracy_loss": loss, "lossy": loss is not None and loss > LOSSY,
            "claimed_default_ms": b, "claimed_plan_ms": m,
            "claimed_speedup": b / m if b and m else None}


def figures(plan: dict, children: list[dict]) -> dict[str, Any]:
    """The clean figures of the children's samples, pooled, against plan.json's claims; each
    child's own speed-up (default median / plan median) in `process_speedups`."""
    import numpy as np

    from metainfer_core.decide.noise import ratio_bounds     # the decision's own statistic

    out = claims(plan)
    d = [x for c in children for x in c["default_samples_ms"]]
    p = [x for c in children for x in c["plan_samples_ms"]]
    default_ms, plan_ms = float(np.median(d)), float(np.median(p))
    ratio, low, high = ratio_bounds(d, p)
    speedup = default_ms / plan_ms
    out |= {"default_ms": default_ms, "plan_ms": plan_ms, "speedup": speedup, "paired_ratio": ratio,
            "ratio_low": low, "ratio_high": high, "rounds": len(d),
            "process_speedups": [float(np.median(c["default_samples_ms"]) / np.median(c["plan_samples_ms"]))
                                 for c in children]}
    claimed_default = out["claimed_default_ms"]
    out["default_error"] = claimed_default / default_ms - 1 if claimed_default else None
    out["default_holds"] = out["default_error"] is not None and abs(out["default_error"]) <= DEFAULT_WITHIN
    if out["adopted"] and out["claimed_speedup"]:
        out["holds"] = abs(speedup / out["claimed_speedup"] - 1) <= HOLDS
        out["lossy_ok"] = speedup >= LOSSY_MIN if out["lossy"] else None
    else:       # the default kept: its clean figure against plan.json's, the pair an A/A
        out["holds"], out["lossy_ok"] = None, None
    return out


def clean_check(run_folder: str | Path, rounds: int = ROUNDS, feeds=None, seed: int = 0, max_s: float = MAX_S,
                timeout: float = CHILD_TIMEOUT_S, processes: int = PROCESSES) -> dict[str, Any]:
    """The clean check of one run folder (see the module docstring): {decision, adopted,
    execution_path, actions, accuracy_loss, lossy, claimed_default_ms, claimed_plan_ms,
    claimed_speedup, default_ms, plan_ms (medians), speedup (default_ms / plan_ms), paired_ratio
    (median per-round plan / default), ratio_low / ratio_high (its bootstrap 5 / 95 % bounds),
    rounds, default_error (claimed_default_ms / default_ms - 1), default_holds (within 10 %),
    holds (an adopted plan's clean speed-up within 3 % of the claim; None otherwise), lossy_ok (a
    lossy adopted plan's clean speed-up >= 1.03x; None otherwise), process_speedups (each fresh
    process's own), child: {pid, ...} (the first process's; `children` all of them)}. The
    figures pool `processes` fresh processes run one after another (`rounds` and `max_s` split
    between them): one process's speed-up lands a few % from the next one's, and the claim is
    judged against what a deployment meets on average; each one's is shown beside it.
    `feeds`: a feed dict, a list of them or a data.inputs .npz (its first sample); None: adapt's
    seeded random input. Never raises: a failure is an `error` field beside what plan.json says."""
    folder = Path(run_folder)
    out: dict[str, Any] = {"run_folder": str(folder)}
    try:
        plan = json.loads((folder / "plan.json").read_text())
        out |= claims(plan)
    except Exception as exc:  # noqa: BLE001
        return out | {"error": f"plan.json: {type(exc).__name__}: {exc}"}
    try:
        import numpy as np

        feed = first_feed(folder, feeds, seed)
        settings = default_settings(plan)
        children = []
        with tempfile.TemporaryDirectory(prefix="metainfer-clean-") as tmp:
            npz = Path(tmp) / "feed.npz"
            np.savez(npz, **feed)
            cmd = [sys.executable, "-m", "bench.clean_check", "--child", "--run", str(folder.resolve()),
                   "--feeds", str(npz), "--settings", json.dumps(settings),
                   "--rounds", str(max(int(rounds) // processes, 1)), "--max-s", str(float(max_s) / processes)]
            for _ in range(max(processes, 1)):
                proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
                child = child_answer(proc)
                if child is None:
                    return out | {"error": f"the child exited {proc.returncode} without a result: {last_words(proc)}"}
                if child.get("error"):
                    return out | {"error": child["error"], "child": child}
                children.append(child)
        out |= figures(plan, children)
        out["children"] = [{k: v for k, v in c.items() if not k.endswith("_samples_ms")} for c in children]
        out["child"] = out["children"][0]
        out["parent_pid"] = os.getpid()
        return out
    except subprocess.TimeoutExpired:
        return out | {"error": f"the child ran past {timeout:.0f} s"}
    except Exception as exc:  # noqa: BLE001 - a check that breaks is a row, not a crash
        return out | {"error": f"{type(exc).__name__}: {exc}"}


# ---------------------------------------------------------------------------------------------- two adapts

def plan_key(plan: dict) -> tuple:
    """What makes two adapts' plans the same: the default kept (any decision but adapted), or
    the chosen actions (kind, scope, params) on the same execution path (label and settings)."""
    if plan.get("decision") != "adapted":
        return ("default",)
    path = plan.get("execution_path") or {}
    acts = tuple((a.get("kind"), a.get("scope"), json.dumps(a.get("params") or {}, sort_keys=True))
                 for a in plan.get("actions") or [])
    return ("adapted", acts, path.get("label"), json.dumps(path.get("settings") or {}, sort_keys=True))


def within_noise(a: dict | None, b: dict | None) -> bool | None:
    """Two clean checks' speed-ups are equal within noise: their paired ratios' bootstrap intervals
    [ratio_low, ratio_high] overlap, or the speed-ups differ by less than the decision's noise
    bound (decide/noise.py MIN_GAIN: two sessions of one graph, or one graph in two processes,
    run up to that far apart, however tight each one's interval). None when either has no
    interval."""
    from metainfer_core.decide.noise import MIN_GAIN

    if not a or not b or any(x.get(k) is None for x in (a, b) for k in ("ratio_low", "ratio_high")):
        return None
    overlap = max(a["ratio_low"], b["ratio_low"]) <= min(a["ratio_high"], b["ratio_high"])
    close = bool(a.get("speedup") and b.get("speedup") and abs(a["speedup"] / b["speedup"] - 1) < MIN_GAIN)
    return overlap or close


def compare_twice(plan_a: dict, plan_b: dict, clean_a: dict | None = None, clean_b: dict | None = None) -> dict:
    """Two adapts of one model: {agree (same plan_key), decisions, within_noise (their clean
    speed-ups equal within noise), clean_speedups}."""
    return {"agree": plan_key(plan_a) == plan_key(plan_b),
            "decisions": [plan_a.get("decision"), plan_b.get("decision")],
            "within_noise": within_noise(clean_a, clean_b),
            "clean_speedups": [(c or {}).get("speedup") for c in (clean_a, clean_b)]}


# ---------------------------------------------------------------------------------------------- the CLI

def describe(r: dict) -> str:
    """clean_check's result, readably."""
    def ms(x):
        return "–" if x is None else f"{x:.4g} ms"

    def x(v):
        return "–" if v is None else f"{v:.3f}x"

    def yn(v):
        return "–" if v is None else "yes" if v else "NO"

    lines = [f"run folder:        {r.get('run_folder')}",
             f"decision:          {r.get('decision')} ({r.get('execution_path')}, actions: "
             f"{', '.join(a for a in r.get('actions') or [] if a) or '-'}; accuracy loss "
             f"{'–' if r.get('accuracy_loss') is None else format(r['accuracy_loss'], '.3g')}"
             f"{', lossy' if r.get('lossy') else ''})"]
    if r.get("error"):
        return "\n".join(lines + [f"error:             {r['error']}"])
    c = r.get("child") or {}
    lines += [f"fresh process:     pid {c.get('pid')} (parent {r.get('parent_pid')}), {c.get('modules')} modules, "
              f"heavy ones loaded: {', '.join(c.get('heavy_modules') or []) or 'none'}; default settings "
              f"{c.get('default_settings')}",
              f"timing:            {r.get('rounds')} alternating rounds in {len(r.get('children') or [c])} "
              f"process(es), {sum(k.get('timing_s', 0) for k in r.get('children') or [c]):.1f} s, each after "
              f"{c.get('warm_runs')} warm-up runs or so",
              f"default:           clean {ms(r.get('default_ms'))}, plan.json {ms(r.get('claimed_default_ms'))} "
              f"(error {'–' if r.get('default_error') is None else format(r['default_error'], '+.1%')}, within "
              f"{DEFAULT_WITHIN:.0%}: {yn(r.get('default_holds'))})",
              f"plan:              clean {ms(r.get('plan_ms'))}, plan.json {ms(r.get('claimed_plan_ms'))}",
              f"speed-up:          clean {x(r.get('speedup'))} (each process: "
              f"{', '.join(x(v) for v in r.get('process_speedups') or [])}), claimed {x(r.get('claimed_speedup'))}; paired ratio "
              f"plan/default {r.get('paired_ratio', 0):.3f} [{r.get('ratio_low', 0):.3f}, {r.get('ratio_high', 0):.3f}]",
              f"holds within {HOLDS:.0%}:   {yn(r.get('holds'))}"
              + ("" if r.get("adopted") else " (the default was kept: no claim to check)")]
    if r.get("adopted") and r.get("lossy"):
        lines.append(f"lossy, >= {LOSSY_MIN}x:   {yn(r.get('lossy_ok'))}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        return _child_main(argv[1:])
    import argparse

    ap = argparse.ArgumentParser(prog="python -m bench.clean_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_folder", type=Path)
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--processes", type=int, default=PROCESSES, help="fresh processes pooled, one after another")
    ap.add_argument("--max-s", type=float, default=MAX_S, help="timing stops past this (once 30 rounds ran)")
    ap.add_argument("--inputs", type=Path, default=None, help="the run's data.inputs .npz (default: random inputs)")
    ap.add_argument("--seed", type=int, default=0, help="the run's seed (random inputs)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    a = ap.parse_args(argv)
    r = clean_check(a.run_folder, a.rounds, a.inputs, a.seed, a.max_s, processes=a.processes)
    print(json.dumps(r, indent=1) if a.json else describe(r))
    return 1 if r.get("error") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
