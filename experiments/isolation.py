"""Which conditions of an adapt's process change a timing? One model's default timed
against itself (an A/A pair: verify/worker.py time_pair, verify's interleaved method) under each
condition, the conditions in turn, repeated; each condition's median default latency against the
same pair timed in a fresh worker process with nothing else running (verify/worker.py
time_pair_isolated), measured in the same repeat.

Conditions:
- worker: the pair in a fresh worker process (what verify and the confirmation now do);
- here: the pair in this process, before anything else is loaded beside it;
- here + leftovers: beside LEFTOVERS OpenVINO compiled models and as many ONNX Runtime sessions
  of the same model, each run once and kept alive (what a search and path costs leave behind);
- here + leftovers + busy thread: and a Python thread of this process busy BUSY_SHARE of the
  time (a flow's logging and API threads);
- here + leftovers + busy process: a separate process busy BUSY_SHARE of the time instead (the
  temporary Prefect server);
- worker + busy process: the worker, with that process running.

    python -m experiments.isolation MODEL.onnx [--inputs NPZ] [--repeats N] [--leftovers K]

Prints one table (median default ms per condition, its ratio to the worker's in the same repeat,
median over repeats, and the A/A paired ratio) and, with --json PATH, the raw figures.
"""
from __future__ import annotations

import json
import multiprocessing
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
REPEATS = 3
LEFTOVERS = 3
BUSY_SHARE = 0.12       # of one core: what the idle temporary Prefect server averaged
PERIOD_S = 0.05


def _busy(stop, share: float = BUSY_SHARE) -> None:
    """Spin `share` of every PERIOD_S, sleep the rest, until `stop` is set."""
    while not stop.is_set():
        end = time.perf_counter() + share * PERIOD_S
        while time.perf_counter() < end:
            pass
        time.sleep((1 - share) * PERIOD_S)


def _backend():
    from app.compose import target_backend

    return target_backend("cpu")


def _bound(model: onnx.ModelProto, npz: str | None) -> tuple[onnx.ModelProto, dict]:
    """The model with its symbolic dims bound to the first sample's shape (as adapt binds
    them), and that sample; without samples, the model and a seeded random input."""
    if npz:
        from metainfer_core.normalize.inputs import load_samples, sample_feeds, sample_shapes
        from metainfer_core.normalize.shapes import bind_input_shapes

        samples = load_samples(npz)
        model = bind_input_shapes(model, sample_shapes(model, samples, None)[0])
        return model, sample_feeds(model, samples, npz, "labels")[0][0]
    from metainfer_core.ir.tensors import random_feeds

    return model, random_feeds(model, seed=0)


def _leftovers(backend, model: onnx.ModelProto, feed: dict, k: int) -> list:
    """k OpenVINO compiled models and k ONNX Runtime sessions of `model`, each run once."""
    import openvino as ov

    kept, core = [], ov.Core()
    for _ in range(k):
        c = core.compile_model(core.read_model(model.SerializeToString(), b""), "CPU", {"PERFORMANCE_HINT": "LATENCY"})
        request = c.create_infer_request()
        request.infer({i.get_any_name(): feed[i.get_any_name()] for i in c.inputs})
        session = backend.compile(model)
        session.run(feed)
        kept += [c, request, session]
    return kept


def _figures(t) -> dict:
    from metainfer_core.decide.noise import ratio_bounds

    if t.error:
        return {"error": t.error}
    ratio, low, high = ratio_bounds(t.default_ms, t.plan_ms)
    return {"default_ms": float(np.median(t.default_ms)), "ratio": ratio, "low": low, "high": high,
            "rounds": len(t.default_ms)}


def measure(model: onnx.ModelProto, feed: dict, repeats: int, leftovers: int) -> dict[str, list[dict]]:
    from metainfer_core.verify.worker import time_pair, time_pair_isolated

    backend = _backend()
    out: dict[str, list[dict]] = {}
    kept: list = []

    def record(name: str, t) -> None:
        out.setdefault(name, []).append(_figures(t))
        f = out[name][-1]
        print(f"  {name}: {f.get('default_ms', float('nan')):.4g} ms", file=sys.stderr, flush=True)

    for r in range(repeats):
        print(f"repeat {r + 1} of {repeats}", file=sys.stderr, flush=True)
        record("worker", time_pair_isolated(backend, model, model, feed))
        if r == 0:      # the first repeat's "here" is the only one before leftovers exist
            record("here", time_pair(backend, model, model, feed))
            kept = _leftovers(backend, model, feed, leftovers)
        record("here + leftovers", time_pair(backend, model, model, feed))
        stop = threading.Event()
        th = threading.Thread(target=_busy, args=(stop,), daemon=True)
        th.start()
        record("here + leftovers + busy thread", time_pair(backend, model, model, feed))
        stop.set()
        th.join()
        spawn = multiprocessing.get_context("spawn")
        pstop = spawn.Event()
        proc = spawn.Process(target=_busy, args=(pstop,), daemon=True)
        proc.start()
        record("here + leftovers + busy process", time_pair(backend, model, model, feed))
        record("worker + busy process", time_pair_isolated(backend, model, model, feed))
        pstop.set()
        proc.join()
    del kept
    return out


def table(out: dict[str, list[dict]]) -> list[str]:
    base = [f.get("default_ms") for f in out["worker"]]
    lines = ["| condition | default ms (median of repeats) | vs worker, same repeat | A/A paired ratio [95% bounds] |",
             "|---|---|---|---|"]
    for name, figs in out.items():
        ok = [(f, b) for f, b in zip(figs, base if name != "here" else base[:1]) if "default_ms" in f and b]
        if not ok:
            lines.append(f"| {name} | failed | | |")
            continue
        ms = float(np.median([f["default_ms"] for f, _ in ok]))
        rel = float(np.median([f["default_ms"] / b for f, b in ok]))
        last = ok[-1][0]
        lines.append(f"| {name} | {ms:.4g} | {rel - 1:+.1%} | {last['ratio']:.3f} [{last['low']:.3f}, {last['high']:.3f}] |")
    return lines


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    path, npz, repeats, leftovers, json_path = argv.pop(0), None, REPEATS, LEFTOVERS, None
    while argv:
        flag = argv.pop(0)
        value = argv.pop(0)
        if flag == "--inputs":
            npz = value
        elif flag == "--repeats":
            repeats = int(value)
        elif flag == "--leftovers":
            leftovers = int(value)
        elif flag == "--json":
            json_path = Path(value)
        else:
            print(f"unknown option {flag}\n{__doc__}", file=sys.stderr)
            return 2
    model, feed = _bound(onnx.load(path), npz)
    out = measure(model, feed, repeats, leftovers)
    print(f"\n{Path(path).name}: {repeats} repeats, {leftovers} leftover OpenVINO models and ORT sessions, "
          f"busy {BUSY_SHARE:.0%} of a core\n")
    print("\n".join(table(out)))
    if json_path:
        json_path.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
