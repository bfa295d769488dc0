"""What bench/serving_peers.py serves beside meta-infer's plan: the peers' models, built here in
the parent with bench/peers.py's own helpers (quantizers and NNCF load far more than a deployment,
so the fresh process gets files), and the serving configuration of each peer a user would pick
for the load (issue 51): ONNX Runtime as one session of every core and as one session per
request splitting the cores, OpenVINO f32 under its THROUGHPUT hint (the streams the plugin picks,
as benchmark_app runs it) and its LATENCY hint, NNCF int8 under the hint of the load, and ORT
quantize_static under both ONNX Runtime settings. One request at a time: every peer on all cores."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx

# the peers built from default.onnx, in table order (bench/labels.py's names)
PEERS = ("ort_default", "ov_f32", "ov_nncf_int8", "ort_static")
OV_SPEC = {"memory_limit_bytes": 0}


def ort_spec(plan: dict) -> dict[str, Any]:
    """The `cpu` target's ONNX Runtime settings as the adapt ran them (plan.json `target.driver`:
    providers, graph optimisation), less the thread count, which each setting gives."""
    from bench.clean_check import default_settings

    spec = default_settings(plan)
    spec.pop("intra_op_threads", None)
    return {"memory_limit_bytes": 0, **spec}


def build_files(default_file: Path, feeds: list[dict[str, np.ndarray]], out: Path,
                peers: tuple[str, ...] = PEERS) -> dict[str, Path | str]:
    """{peer: the model file it serves, or why it could not be built}: default.onnx itself for
    ORT default and OpenVINO f32, quantize_static's graph (calibrated on `feeds`) and NNCF's int8
    OpenVINO model (saved as IR, f32 weights kept) written under `out`."""
    from bench import peers as bp

    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path | str] = {}
    default = None
    for peer in peers:
        try:
            if peer in ("ort_default", "ov_f32"):
                files[peer] = default_file
                continue
            default = default if default is not None else onnx.load(str(default_file))
            if peer == "ort_static":
                files[peer] = out / "ort_static.onnx"
                onnx.save(bp.ort_quantized(default, feeds), str(files[peer]))
            elif peer == "ov_nncf_int8":
                import openvino as ov

                files[peer] = out / "nncf_int8.xml"
                ov.save_model(bp.nncf_int8(bp.ov_read(default, feeds[0]), feeds), str(files[peer]),
                              compress_to_fp16=False)
            else:
                raise ValueError(f"unknown peer {peer!r}: choose from {PEERS}")
        except Exception as exc:  # noqa: BLE001 - a peer that cannot be built is its row's error
            files[peer] = f"build: {bp.short(exc)}"
    return files


def ort_settings(cores: int, concurrency: int) -> list[dict[str, Any]]:
    """One session of every core; with several requests, also one session per request, the cores
    split, and with more requests than cores one session per core."""
    out = [{"sessions": 1, "intra_op_threads": cores}]
    if concurrency > 1:
        out.append({"sessions": concurrency, "intra_op_threads": max(1, cores // concurrency)})
    if concurrency > cores > 1:
        out.append({"sessions": cores, "intra_op_threads": 1})
    return out


def ov_setting(hint: str, cores: int) -> dict[str, Any]:
    """OpenVINO on every core: THROUGHPUT with the streams its plugin picks, LATENCY one stream."""
    return {"performance_hint": hint, "intra_op_threads": cores} | ({"num_streams": 1} if hint == "LATENCY" else {})


def tag(setting: dict[str, Any]) -> str:
    """'1x2' (sessions x threads) or the OpenVINO hint: the label's second part."""
    if setting.get("performance_hint"):
        return str(setting["performance_hint"])
    return f"{setting.get('sessions', 1)}x{setting.get('intra_op_threads')}"


def recorded_default(default_file: Path, spec: dict[str, Any], setting: dict[str, Any]) -> list[dict[str, Any]]:
    """default.onnx on ONNX Runtime at `setting` (plan.json's for the default), as a configuration."""
    return [{"label": f"default/{tag(setting)}", "peer": "default", "setting": dict(setting), "kind": "onnx",
             "file": str(default_file), "runtime": "onnxruntime", "precision": "f32", "spec": dict(spec)}]


def configurations(files: dict[str, Path | str], spec: dict[str, Any], cores: int,
                   concurrency: int) -> list[dict[str, Any]]:
    """The plan, then each peer with each of its settings for the load: {label, peer, kind, file,
    runtime, precision, spec, setting} (or {label, peer, setting, error} where its model could not
    be built); kinds as bench/serving_child.py opens them."""
    hint = "THROUGHPUT" if concurrency > 1 else "LATENCY"
    wanted: list[tuple[str, str, dict]] = []
    for peer in files:
        if peer in ("ort_default", "ort_static"):
            wanted += [(peer, "onnxruntime", s) for s in ort_settings(cores, concurrency)]
        elif peer == "ov_f32":
            wanted += [(peer, "openvino", ov_setting(h, cores)) for h in dict.fromkeys((hint, "LATENCY"))]
        elif peer == "ov_nncf_int8":
            wanted.append((peer, "openvino", ov_setting(hint, cores)))
    out: list[dict[str, Any]] = [{"label": "meta_infer", "peer": "meta_infer", "kind": "plan"}]
    for peer, runtime, setting in wanted:
        row = {"label": f"{peer}/{tag(setting)}", "peer": peer, "setting": setting}
        file = files[peer]
        if isinstance(file, str):
            out.append(row | {"error": file})
            continue
        kind = "ov_ir" if Path(file).suffix == ".xml" else "onnx"
        out.append(row | {"kind": kind, "file": str(file), "runtime": runtime, "precision": "f32",
                          "spec": dict(spec if runtime == "onnxruntime" else OV_SPEC)})
    return out
