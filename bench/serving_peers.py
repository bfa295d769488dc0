"""meta-infer against its peers as a service serves them (issue 51's done-when): each model is
adapted with serving=throughput (the defaults otherwise) into a temporary artifacts folder, then
ONE fresh process (bench/serving_child.py: no Prefect, MLflow, NNCF or bench.peers loaded) serves
side by side, under the same closed-loop load (metainfer_core.serving.load.under_load: plan.json
`serving.concurrency` clients, the same time for all, in two halves in swapped order):

- meta-infer's plan: load_plan(run folder), with the setting plan.json records, opened first
  and again last (what is opened first ran a few % slower here), both copies' loads pooled;
- ONNX Runtime on default.onnx: 1 session x N threads and `concurrency` sessions x N/concurrency
  threads (N: plan.json `serving.cores`);
- OpenVINO f32 under its THROUGHPUT hint (the streams its plugin picks, as benchmark_app runs it)
  and under its LATENCY hint, on N threads;
- NNCF int8 (bench/peers.py nncf_int8) under OpenVINO's THROUGHPUT hint;
- ORT quantize_static under both ONNX Runtime settings (the better one counts).

Every configuration is scored with plan_loss against ONNX Runtime's fp32 outputs on the model's
real inputs; a peer counts only with its loss within plan.json's `accuracy_bound` and its latency
percentile within plan.json's `serving.bound_ms`. Printed: one table per model (requests/s, p50,
p99, bound held, loss), then the summary: meta-infer's requests/s against the best counted peer's
(the ratio, and the goal: at least 0.97), plan.json's claimed requests/s against the plan
served alone in 3 more fresh processes one after the other, as a user deploys it (their median
within 5 %; their spread, max / min - 1, is the noise the machine had then), the geo-mean of the
ratios last. Where a plan was adopted under load, each of those processes also serves default.onnx
after the plan at the setting plan.json recorded for it, and the plan's requests/s over the
default's (their median) is checked against plan.json's: the figure a shared machine's drift
between processes leaves alone.

--latency: the same with serving=latency serving.threads=0 (every core, one request at a time):
one client, the peers on all cores (ORT 1 session x N threads, OpenVINO LATENCY on N threads, NNCF
int8, ORT quantize_static), compared on median latency (ratio: best peer p50 / meta-infer p50).

    python -m bench.serving_peers [--only key,key] [--latency] [--duration S] [--timeout S]
                                  [--artifacts DIR] [--json PATH] [extra hydra overrides]

--only: corpus model keys (default: a few small ones that adapt fast); --duration: seconds each
configuration is served (both halves together); --timeout: per adapt; --artifacts: adapt into
DIR and keep it (default: a temporary folder, removed); --json: the rows, written after each model.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("wakeword_melspec", "wakeword_embedding", "basic_pitch_nmp", "magika_v3_3")
DURATION_S = 4.0          # each configuration served this long (two halves, order swapped)
ADAPT_TIMEOUT_S = 1800.0
CHILD_TIMEOUT_S = 900.0
ALONE_REPEATS = 3         # fresh processes serving the plan alone: their median is checked against plan.json
SAMPLES, SEED = 4, 0      # random inputs where a model has no real ones (adapt's own draw)


def mode_overrides(latency: bool) -> list[str]:
    return ["serving=latency", "serving.threads=0"] if latency else ["serving=throughput"]


def plan_facts(plan: dict) -> dict[str, Any]:
    """What the row takes from plan.json: the load, the bounds, the decision and the claims."""
    from metainfer_core.serving.options import usable_cores

    s = plan.get("serving") or {}
    served = s.get("plan") or {}
    measured, baseline = plan.get("measured") or {}, plan.get("baseline") or {}
    concurrency = int(s.get("concurrency") or 1)
    return {"mode": s.get("mode") or ("throughput" if concurrency > 1 else "latency"),
            "cores": int(s.get("cores") or usable_cores()), "concurrency": concurrency,
            "percentile": s.get("percentile") or 99.0, "bound_ms": s.get("bound_ms"),
            "accuracy_bound": plan.get("accuracy_bound"), "decision": plan.get("decision"),
            "execution_path": (plan.get("execution_path") or {}).get("label") or "onnxruntime",
            "plan_setting": s.get("setting"), "serving_reason": s.get("reason"),
            "claimed_throughput_per_s": served.get("throughput_per_s"),
            "default_setting": (s.get("default") or {}).get("setting"),
            "claimed_default_throughput_per_s": (s.get("default") or {}).get("throughput_per_s"),
            "claimed_latency_ms": measured.get("latency_ms") or baseline.get("latency_ms")}


def model_feeds(default_file: Path, npz: Path | None) -> list[dict]:
    """The inputs the adapt got: the data.inputs .npz as adapt reads it, else adapt's random draw."""
    import onnx

    from bench.ort_baselines import adapt_feeds, real_feeds

    default = onnx.load(str(default_file))
    return real_feeds(default, npz) if npz is not None else adapt_feeds(default, SAMPLES, SEED)


def serve_run(folder: Path, npz: Path | None = None, duration_s: float = DURATION_S,
              peers: tuple[str, ...] | None = None, timeout: float = CHILD_TIMEOUT_S,
              warm_s: float | None = None, default_setting: dict | None = None) -> dict[str, Any]:
    """One run folder's plan and its peers served in one fresh process: plan_facts plus
    {configs: [...], child: {pid, heavy_modules, modules}, serve_s}, or plus {error}. `peers`:
    a subset of serving_configs.PEERS (default all; () serves the plan alone); `default_setting`:
    default.onnx also served after the plan at that setting (the one plan.json recorded for it)."""
    import numpy as np

    from bench import serving_configs as sc
    from bench.clean_check import child_answer, last_words

    folder = Path(folder)
    plan = json.loads((folder / "plan.json").read_text())
    row = plan_facts(plan)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="metainfer-serving-") as tmp:
        feeds = model_feeds(folder / "default.onnx", npz)
        files = sc.build_files(folder / "default.onnx", feeds, Path(tmp), sc.PEERS if peers is None else peers)
        configs = sc.configurations(files, sc.ort_spec(plan), row["cores"], row["concurrency"])
        if default_setting is not None:
            configs += sc.recorded_default(folder / "default.onnx", sc.ort_spec(plan), default_setting)
        np.savez(Path(tmp) / "feeds.npz", **{f"{i}/{k}": v for i, f in enumerate(feeds) for k, v in f.items()})
        spec = {"run": str(folder.resolve()), "configs": configs, "feeds": str(Path(tmp) / "feeds.npz"),
                "concurrency": row["concurrency"], "duration_s": duration_s, "percentile": row["percentile"],
                "warm_s": warm_s}
        (Path(tmp) / "spec.json").write_text(json.dumps(spec))
        try:
            proc = subprocess.run([sys.executable, "-m", "bench.serving_child", str(Path(tmp) / "spec.json")],
                                  cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return row | {"error": f"the serving process ran past {timeout:.0f} s"}
    child = child_answer(proc)
    if child is None:
        return row | {"error": f"the serving process exited {proc.returncode} without a result: {last_words(proc)}"}
    if child.get("error"):
        return row | {"error": f"serving process: {child['error']}"}
    return row | {"configs": child.pop("configs"), "child": child, "serve_s": time.perf_counter() - t0}


def serve_alone(folder: Path, npz: Path | None, duration_s: float, repeats: int = ALONE_REPEATS,
                warm_s: float | None = None) -> list[dict[str, Any]]:
    """The plan served alone, as a user deploys it, in `repeats` fresh processes one after the
    other: each process's row for the plan (its figures, or its error). Under load where a plan
    was adopted, default.onnx is served after it in the same process at the setting plan.json
    recorded for it, its figures under the row's `default` (the speed-up over the default
    reproduces where a shared machine's speed drifts between processes)."""
    plan = json.loads((Path(folder) / "plan.json").read_text())
    facts = plan_facts(plan)
    beside = facts["default_setting"] if facts["mode"] == "throughput" and plan.get("decision") == "adapted" else None
    out = []
    for _ in range(repeats):
        r = serve_run(folder, npz, duration_s, peers=(), warm_s=warm_s, default_setting=beside)
        configs = r.get("configs") or []
        row = next(iter(configs), {"error": r.get("error") or "the plan was not served"})
        out.append(row | ({"default": configs[1]} if beside is not None and len(configs) > 1 else {}))
    return out


def bench_model(entry, overrides: list[str], latency: bool, duration_s: float, timeout: float,
                say: Callable[[str], None]) -> dict[str, Any]:
    """Adapt `entry` (bench/modelset.py Entry) in the mode, then serve_run its run folder."""
    from bench.adapt_run import adapt

    row: dict[str, Any] = {"model": entry.key, "mode": "latency" if latency else "throughput"}
    if entry.error:
        return row | {"error": entry.error}
    say(f"adapting {entry.key} with {' '.join(mode_overrides(latency))}")
    r = adapt([*entry.args, *overrides, *mode_overrides(latency)], None, timeout)
    row |= {"rc": r["rc"], "adapt_s": r["wall_s"]}
    if r["plan"] is None:
        return row | {"error": f"adapt (exit {r['rc']}): {r['error']}"}
    folder = r["plan_path"].parent
    say(f"serving {entry.key}'s plan and its peers in one fresh process ({duration_s:g} s each)")
    row |= {"run_folder": str(folder)} | serve_run(folder, entry.npz, duration_s)
    say(f"serving {entry.key}'s plan alone in {ALONE_REPEATS} fresh processes, one after the other")
    return row | {"alone": serve_alone(folder, entry.npz, duration_s)}


FLAGS = ("--only", "--latency", "--duration", "--timeout", "--artifacts", "--json")


def parse(argv: list[str]) -> dict[str, Any] | int:
    """The options, or an exit code (0: --help printed, 2: refused)."""
    a: dict[str, Any] = {"only": list(MODELS), "latency": False, "duration": DURATION_S, "timeout": ADAPT_TIMEOUT_S,
                         "artifacts": None, "json": None, "overrides": []}
    argv = list(argv)
    while argv:
        x = argv.pop(0)
        if x in ("-h", "--help"):
            print(__doc__)
            return 0
        if x == "--latency":
            a["latency"] = True
        elif x in FLAGS:
            if not argv:
                print(f"{x} needs a value", file=sys.stderr)
                return 2
            v = argv.pop(0)
            a[x[2:]] = (v.split(",") if x == "--only" else float(v) if x in ("--duration", "--timeout")
                        else Path(v))
        elif x.startswith("-"):
            print(f"unknown option {x!r}: the options are {list(FLAGS)} (then hydra overrides, key=value); see "
                  "python -m bench.serving_peers --help", file=sys.stderr)
            return 2
        else:
            a["overrides"].append(x)
    return a


def main(argv: list[str]) -> int:
    a = parse(argv)
    if isinstance(a, int):
        return a
    from bench import corpus, modelset, serving_tables

    unknown = corpus.unknown_keys(a["only"])
    if unknown:
        print(unknown, file=sys.stderr)
        return 2
    say = lambda msg: print(f"(serving: {msg})", file=sys.stderr, flush=True)  # noqa: E731
    rows = []
    with tempfile.TemporaryDirectory(prefix="metainfer-serving-adapt-") as tmp:
        artifacts = a["artifacts"] or Path(tmp)
        overrides = modelset.with_artifacts(a["overrides"], artifacts)
        for entry in modelset.entries(a["only"], with_corpus=True, samples=corpus.SAMPLES):
            rows.append(bench_model(entry, overrides, a["latency"], a["duration"], a["timeout"], say))
            if rows[-1].get("error"):
                say(f"{entry.key} failed: {rows[-1]['error']}")
            else:
                print("\n".join(serving_tables.model_table(rows[-1])) + "\n", flush=True)
            if a["json"] is not None:       # after each model: a run cut short keeps what it measured
                a["json"].write_text(json.dumps(rows, indent=1, default=str))
    print("\n".join(serving_tables.summary_table(rows)))
    return 1 if any(r.get("error") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
