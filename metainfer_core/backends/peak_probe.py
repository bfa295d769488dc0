"""Peak memory of one ONNX Runtime session, measured in a fresh process.

In a long-lived process freed memory is reused without growing the resident set, so the
footprint of a new session hides in it; a fresh interpreter sees it whole. Usage (internal):
python -m metainfer_core.backends.peak_probe <model.onnx> <feeds.npz> <session.json>
prints the bytes the session added to the process's peak resident set."""
from __future__ import annotations

import json
import sys

import numpy as np
import onnxruntime as ort

from metainfer_core.memory_probe import PeakMemory


def main(model_path: str, feeds_path: str, options_path: str) -> None:
    opts = json.loads(open(options_path).read())
    so = ort.SessionOptions()
    so.intra_op_num_threads = opts["intra_op_threads"]
    so.inter_op_num_threads = 1
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, opts["graph_optimization_level"])
    so.log_severity_level = 3
    data = np.load(feeds_path)
    feeds = {k: data[k] for k in data.files}
    with PeakMemory() as pm:
        sess = ort.InferenceSession(model_path, so, providers=opts["providers"])
        sess.run(None, feeds)
    print(pm.bytes)


if __name__ == "__main__":
    main(*sys.argv[1:4])
