"""Peak memory of one inference session on any runtime, measured in a fresh process.

In a long-lived process freed memory is reused without growing the resident set, so the
footprint of a new session hides in it; a fresh interpreter sees it whole. `probe()` runs
python -m metainfer_core.backends.peak_probe <model.onnx> <feeds.npz> <options.json>,
which prints the bytes the session's creation and one run added to the peak resident set; the
session is the one options["runtime"] opens (its `peak_session`, backends/runtimes/)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np

from metainfer_core.backends.runtimes import default_runtime, runtime_of
from metainfer_core.memory_probe import PeakMemory


def probe(model_bytes: bytes, feeds: dict[str, np.ndarray], options: dict[str, Any]) -> int:
    """options: {"runtime": <name>, ...the settings that runtime's session is opened with}."""
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


def main(model_path: str, feeds_path: str, options_path: str) -> None:
    opts = json.loads(open(options_path).read())
    data = np.load(feeds_path)
    feeds = {k: data[k] for k in data.files}
    # the runtime's own code (its import, its plugin libraries) is loaded before measuring:
    # what counts is what the session for this model adds, on every path
    open_session = runtime_of(opts.get("runtime") or default_runtime().name).peak_session(opts)
    with PeakMemory() as pm:
        open_session(model_path, feeds)(feeds)
    print(pm.bytes)


if __name__ == "__main__":
    main(*sys.argv[1:4])
