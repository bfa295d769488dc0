"""What a user would try instead of meta-infer, timed beside meta-infer's plan in one run: ONNX
Runtime as it comes, its own quantizers over the whole model (`quantize_static` calibrated on
the same inputs adapt used, `quantize_dynamic`), OpenVINO at its default precision and at f32,
and OpenVINO after NNCF's int8 post-training quantization, plain and accuracy-aware (the peers,
bench/peers.py). All are
timed together with verify's method (timing.interleaved: rounds interleaved, each starting at
the next peer, warm runs, median; same inputs, reference and accuracy metric). ORT default is
loaded twice, first and last (sessions created later ran a few % faster here): its figure pools
both copies' samples, and the ratio between the copies (A/A) is the noise floor."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx

from bench import peers
from bench.labels import PEERS
from metainfer_core.accuracy.metric import run_cpu
from metainfer_core.backends.timing import SETTLE
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.normalize.inputs import load_samples, sample_feeds


def adapt_feeds(model: onnx.ModelProto, samples: int, seed: int) -> list[dict[str, np.ndarray]]:
    """The validation/calibration inputs adapt draws when data.inputs is not given
    (metainfer_core.prepare.stage: random_feeds(model, seed + i) for each sample)."""
    return [random_feeds(model, seed=seed + i) for i in range(samples)]


def compare(default: onnx.ModelProto, plan: onnx.ModelProto | None = None, samples: int = 4, seed: int = 0,
            runs: int = 50, warmup: int = 3, run_folder: str | Path | None = None, settle: int = SETTLE,
            labels=PEERS, feeds: list[dict] | None = None, plans: dict[str, str | Path] | None = None,
            max_loss: float = 0.01) -> dict[str, dict]:
    """Every peer of `default` (bench/labels.py PEERS; `max_loss` bounds the accuracy-aware one) and
    meta-infer's plans, measured together on `feeds` (default: the random inputs adapt generates):
    `meta_infer` when `plan` or `run_folder` is given, and one more per entry of `plans` ({label:
    run folder}, e.g. the weights=latency run as `meta_infer_latency`), each through
    peers.PlanPeer. Returns {label: {latency_ms, p90_ms, accuracy_loss, compile_s, path, error}};
    `ort_default` also carries `aa`, its first copy against the second (1.0 = no noise); a plan
    carries `same_as: "ort_default"` when it is the default artifact itself, or `same_as: <label>`
    when it is the same plan as an earlier one (same graph, same execution path)."""
    feeds = feeds if feeds is not None else adapt_feeds(default, samples, seed)
    reference = run_cpu(default, feeds)
    build = peers.builders(default, feeds, labels, max_loss, reference)
    mine: dict[str, tuple[Path | None, onnx.ModelProto | None]] = {}
    if plan is not None or run_folder is not None:
        mine["meta_infer"] = (Path(run_folder) if run_folder is not None else None, plan)
    mine |= {k: (Path(v), None) for k, v in (plans or {}).items()}
    twins: dict[str, str] = {}
    for label, (folder, model) in mine.items():
        twin = next((k for k in mine if k not in twins and k != label and k in build and folder is not None
                     and mine[k][0] is not None and same_plan(folder, mine[k][0])), None)
        if twin is not None:        # one contender: timed once, reported under both labels
            twins[label] = twin
            continue
        build[label] = build[label + "_aa"] = (lambda f=folder, m=model: peers.PlanPeer(f, m))
    build["ort_default_aa"] = build["ort_default"]
    results = peers.measure(build, feeds, reference, runs, warmup, settle)
    # two sessions of one graph run a few % apart (where their buffers land): the baseline and
    # each plan are timed in two, pooled; a plan that is the default artifact itself (same
    # bytes, same path) is pooled with the baseline, since they are one contender
    timed = [k for k in mine if k not in twins]
    defaults = [k for k in timed if mine[k][0] is not None and is_default(mine[k][0])]
    pooled_ort = _pool(results, ["ort_default", "ort_default_aa"] + [x for k in defaults for x in (k, k + "_aa")])
    if pooled_ort is not None:
        results["ort_default"]["aa"] = pooled_ort
    for k in timed:
        if k in defaults and results["ort_default"].get("latency_ms") is not None:
            results[k] |= {f: results["ort_default"][f] for f in ("latency_ms", "p90_ms")}
            results[k]["same_as"] = "ort_default"
        else:
            _pool(results, [k, k + "_aa"])
        results.pop(k + "_aa", None)
    for k, twin in twins.items():
        results[k] = dict(results[twin], same_as=results[twin].get("same_as", twin))
    results.pop("ort_default_aa", None)
    for v in results.values():
        v.pop("samples_ms", None)
    return results


def same_plan(a: Path, b: Path) -> bool:
    """Two run folders hold one plan: the same model.onnx bytes on the same execution path."""
    try:
        paths = [json.loads((f / "plan.json").read_text()).get("execution_path") for f in (a, b)]
        return paths[0] == paths[1] and (a / "model.onnx").read_bytes() == (b / "model.onnx").read_bytes()
    except (OSError, ValueError):
        return False


def is_default(folder: Path) -> bool:
    """The plan is the unchanged default on the default path (run_folder/model.onnx == default.onnx)."""
    try:
        return (folder / "model.onnx").read_bytes() == (folder / "default.onnx").read_bytes()
    except OSError:
        return False


def _pool(results: dict[str, dict], labels: list[str]) -> float | None:
    """Pool the samples of `labels` (copies of one contender) into the first; returns the first
    copy's median over the second's (the A/A ratio, 1.0 = no noise), None when a copy failed."""
    rows = [results[k] for k in labels]
    if any(r.get("error") or not r.get("samples_ms") for r in rows):
        return None
    aa = rows[0]["latency_ms"] / rows[1]["latency_ms"]
    pooled = [x for r in rows for x in r["samples_ms"]]
    rows[0] |= {"latency_ms": float(np.median(pooled)), "p90_ms": float(np.percentile(pooled, 90))}
    return aa


def real_feeds(model: onnx.ModelProto, npz: str | Path) -> list[dict[str, np.ndarray]]:
    """The data.inputs samples as adapt read them: one feed per sample, cast to and checked
    against `model`'s (bound) inputs (metainfer_core.normalize.inputs, what the normalize stage, normalize.prepare.prepare, uses)."""
    return sample_feeds(model, load_samples(str(npz)), str(npz), "labels")[0]


def compare_run(folder: str | Path, npz: str | Path | None = None, runs: int = 50, samples: int = 4, seed: int = 0,
                warmup: int = 3, labels=PEERS, plans: dict[str, str | Path] | None = None,
                max_loss: float = 0.01) -> tuple[dict[str, dict], int]:
    """compare() for one adapt run folder: the peers of its default.onnx and meta-infer's plan
    (the folder through peers.PlanPeer; `plans`: more run folders of the same model, by label),
    on the inputs the adapt got: the data.inputs `npz` when given (real inputs), else the random
    ones adapt draws (`samples`, `seed`). Returns (compare's result, how many inputs)."""
    default = onnx.load(Path(folder) / "default.onnx")
    feeds = real_feeds(default, npz) if npz is not None else adapt_feeds(default, samples, seed)
    return compare(default, runs=runs, warmup=warmup, run_folder=folder, feeds=feeds, labels=labels, plans=plans,
                   max_loss=max_loss), len(feeds)
