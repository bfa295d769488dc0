"""What a user would try instead of meta-infer: ONNX Runtime's own quantizers over the whole
model with their defaults, `quantize_static` (QDQ, calibrated on the same inputs adapt used)
and `quantize_dynamic`, timed beside the default plan and meta-infer's plan with verify's
method (timing.interleaved on the cpu target's sessions: rounds interleaved, each starting at
the next plan, warm runs, median; same inputs, reference and accuracy metric). The default is
loaded twice, first and last (sessions created later ran a few % faster here): its figure pools
both copies' samples, and the ratio between the copies (A/A) is the noise floor."""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization import CalibrationDataReader, quantize_dynamic, quantize_static

from metainfer_core.accuracy import plan_loss, run_cpu
from metainfer_core.backends import Backend
from metainfer_core.tensors import random_feeds
from metainfer_core.timing import interleaved, settle_runs


class _Feeds(CalibrationDataReader):
    def __init__(self, feeds: list[dict[str, np.ndarray]]):
        self._it = iter(feeds)

    def get_next(self):
        return next(self._it, None)


def adapt_feeds(model: onnx.ModelProto, samples: int, seed: int) -> list[dict[str, np.ndarray]]:
    """The validation/calibration inputs adapt draws when data.inputs is not given
    (metainfer_core.stages: random_feeds(model, seed + i) for each sample)."""
    return [random_feeds(model, seed=seed + i) for i in range(samples)]


def quantized(default: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> dict[str, onnx.ModelProto | str]:
    """{label: model, or the error text when ONNX Runtime's quantizer refuses the model}."""
    out: dict[str, onnx.ModelProto | str] = {}
    with tempfile.TemporaryDirectory(prefix="metainfer-ortq-") as tmp:
        src = Path(tmp) / "default.onnx"
        onnx.save(default, src)
        for label, fn in (("ort_static", lambda dst: quantize_static(src, dst, _Feeds(feeds))),
                          ("ort_dynamic", lambda dst: quantize_dynamic(src, dst))):
            dst = Path(tmp) / f"{label}.onnx"
            root = logging.getLogger()
            level = root.level
            root.setLevel(logging.ERROR)     # the quantizer's "consider pre-processing" advice, once per call
            try:
                fn(dst)
                out[label] = onnx.load(dst)
            except Exception as exc:  # noqa: BLE001 - a refusal is a result the report shows
                out[label] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            finally:
                root.setLevel(level)
    return out


def timed(backend: Backend, models: list[tuple[str, onnx.ModelProto]], feeds: list[dict[str, np.ndarray]],
          reference: list[list[np.ndarray]], runs: int, warmup: int) -> dict[str, dict]:
    """{label: {latency_ms, p90_ms, accuracy_loss, compile_s, error}}; round r starts at plan r mod n."""
    out, compiled = {}, []
    for label, model in models:
        try:
            c = backend.compile(model)
            loss = plan_loss(reference, [c.run(f) for f in feeds])
            for _ in range(warmup):
                c.time_once(feeds[0])
            out[label] = {"label": label, "accuracy_loss": loss, "compile_s": c.compile_s, "error": None}
            compiled.append((label, c))
        except Exception as exc:  # noqa: BLE001 - a plan that does not run is a result, not a crash
            out[label] = {"label": label, "latency_ms": None, "accuracy_loss": None,
                          "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    timed_ = interleaved([c for _, c in compiled], [feeds[0]] * len(compiled), runs, settle_runs(backend))
    for (label, _), xs in zip(compiled, timed_):
        out[label] |= {"latency_ms": float(np.median(xs)), "p90_ms": float(np.percentile(xs, 90)), "samples_ms": xs}
    return out


def compare(backend: Backend, default: onnx.ModelProto, plan: onnx.ModelProto, samples: int, seed: int,
            runs: int, warmup: int) -> dict[str, dict]:
    """The default (loaded first and last), meta-infer's plan, ORT static and dynamic quantization,
    measured together. Returns {label: {latency_ms, p90_ms, accuracy_loss, error}} plus `aa`: the
    first copy of the default against the second (1.0 = no noise)."""
    feeds = adapt_feeds(default, samples, seed)
    reference = run_cpu(default, feeds)
    q = quantized(default, feeds)
    models = [("default", default), ("meta_infer", plan)] + [(k, v) for k, v in q.items() if not isinstance(v, str)] \
        + [("default_aa", default)]
    results = timed(backend, models, feeds, reference, runs, warmup)
    first, second = results.pop("default"), results.pop("default_aa")
    if first.get("error") or second.get("error"):
        results["default"] = first
    else:
        pooled = first["samples_ms"] + second["samples_ms"]
        results["default"] = first | {"latency_ms": float(np.median(pooled)), "p90_ms": float(np.percentile(pooled, 90)),
                                      "aa": first["latency_ms"] / second["latency_ms"]}
    for v in results.values():
        v.pop("samples_ms", None)
    for k, v in q.items():
        if isinstance(v, str):
            results[k] = {"label": k, "latency_ms": None, "accuracy_loss": None, "error": f"quantizer: {v}"}
    return results
