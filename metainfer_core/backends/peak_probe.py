"""Peak memory of one inference session (ONNX Runtime or OpenVINO), measured in a fresh process.

In a long-lived process freed memory is reused without growing the resident set, so the
footprint of a new session hides in it; a fresh interpreter sees it whole. `probe()` runs
python -m metainfer_core.backends.peak_probe <model.onnx> <feeds.npz> <options.json>,
which prints the bytes the session's creation and one run added to the peak resident set."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np

from metainfer_core.ir.tensors import ORT_LOG_SEVERITY
from metainfer_core.memory_probe import PeakMemory


def probe(model_bytes: bytes, feeds: dict[str, np.ndarray], options: dict[str, Any]) -> int:
    """options: {"runtime": "onnxruntime", providers, intra_op_threads, graph_optimization_level}
    or {"runtime": "openvino", "config": compile_model's properties}."""
    with tempfile.TemporaryDirectory(prefix="metainfer-peak-") as tmp:
        paths = [os.path.join(tmp, n) for n in ("model.onnx", "feeds.npz", "options.json")]
        with open(paths[0], "wb") as f:
            f.write(model_bytes)
        np.savez(paths[1], **feeds)
        with open(paths[2], "w") as f:
            json.dump(options, f)
        out = subprocess.run([sys.executable, "-m", "metainfer_core.backends.peak_probe", *paths],
                             capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"peak-memory probe failed: {out.stderr.strip().splitlines()[-1:]}")
    return int(out.stdout.strip().splitlines()[-1])


def _ort_session(model_path: str, opts: dict[str, Any]):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = opts["intra_op_threads"]
    so.inter_op_num_threads = 1
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, opts["graph_optimization_level"])
    so.log_severity_level = ORT_LOG_SEVERITY
    sess = ort.InferenceSession(model_path, so, providers=opts["providers"])
    return lambda feeds: sess.run(None, feeds)


def _ov_session(core, model_path: str, opts: dict[str, Any], feeds: dict[str, np.ndarray]):
    model = core.read_model(model_path)
    model.reshape({k: list(v.shape) for k, v in feeds.items()})
    request = core.compile_model(model, "CPU", opts["config"]).create_infer_request()
    return request.infer


def main(model_path: str, feeds_path: str, options_path: str) -> None:
    opts = json.loads(open(options_path).read())
    data = np.load(feeds_path)
    feeds = {k: data[k] for k in data.files}
    # the runtime's own code (its import, OpenVINO's CPU plugin library) is loaded before measuring:
    # what counts is what the session for this model adds, on either path
    if opts.get("runtime") == "openvino":
        import openvino as ov

        core = ov.Core()
        core.get_property("CPU", "FULL_DEVICE_NAME")          # loads the plugin
        with PeakMemory() as pm:
            _ov_session(core, model_path, opts, feeds)(feeds)
    else:
        import onnxruntime  # noqa: F401

        with PeakMemory() as pm:
            _ort_session(model_path, opts)(feeds)
    print(pm.bytes)


if __name__ == "__main__":
    main(*sys.argv[1:4])
