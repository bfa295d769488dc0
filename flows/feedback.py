"""Send latencies measured by a deployment back to the fingerprint library:
python flows/feedback.py model=<name> target=<name> feedback.latencies_ms=[1.21,1.19,1.25]
                         [feedback.model_path=<deployed.onnx>]   (default: the pair's active plan)

They are stored as runtime whole-model runs under the target's current fingerprint version;
predictor fine-tuning and the next re-profiling learn from them. Python callers use
metainfer_core.predictor.lifecycle.feedback.record_runtime directly."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import onnx

from app.cli import run_cli
from app.tracking.registry import active_plans, download_plan, registered_name
from metainfer_core.backends import backend_for
from metainfer_core.errors import MetaInferError
from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.predictor.lifecycle.feedback import record_runtime, runtime_run


def _deployed_model(s) -> onnx.ModelProto:
    if s.feedback.model_path:
        return onnx.load(s.feedback.model_path)
    name = registered_name(s.model.name, s.target.name)
    version = next((v for v in active_plans(s) if v.name == name), None)
    if version is None:
        raise MetaInferError(f"No active plan for {name}: give the deployed model with feedback.model_path=<file.onnx> "
                             "or run flows/adapt.py for this pair first.")
    with tempfile.TemporaryDirectory(prefix="metainfer-feedback-") as tmp:
        return onnx.load(str(download_plan(s, version, Path(tmp))[0]))


def _body(s, raw) -> str:
    if not s.feedback.latencies_ms:
        raise MetaInferError("No latencies given: add feedback.latencies_ms=[<ms>,<ms>,...] with what the deployment "
                             "measured.")
    info = backend_for(s).info
    try:
        run = runtime_run(_deployed_model(s), s.model.name, s.feedback.latencies_ms)
    except ValueError as exc:
        raise MetaInferError(f"feedback.latencies_ms: {exc}.") from None
    n = record_runtime(FingerprintLibrary(s.tracking.fingerprint_db), info, [run])
    return f"recorded: {n} runtime run of {s.model.name} on {s.target.name} ({info.fingerprint_version})"


def main(argv: list[str]) -> int:
    return run_cli(argv, _body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
