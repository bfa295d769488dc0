"""The fresh process of bench/serving_peers.py: meta-infer's plan and its peers served under one
closed-loop load side by side, loading only what a deployment loads (numpy, onnx, the runtimes,
metainfer_core.plan.deployable and metainfer_core.serving; never Prefect, Hydra, MLflow, NNCF or
bench.peers: the peers' models were built by the parent and come as files).

Each configuration is opened as a thread-safe callable (the plan through load_plan, with the
setting plan.json records; a peer through metainfer_core.serving.pool), scored with plan_loss
against ONNX Runtime's fp32 outputs of default.onnx on every input, then all are served with
metainfer_core/serving/measure.py's method: each for half the time in one order, then half in
the reverse one.

    python -m bench.serving_child SPEC.json     (prints one JSON line: the result or {"error"})
"""
from __future__ import annotations

# nothing heavy at module level: this module is the child's __main__
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

# modules a deployment does not load (clean_check's list, and the peers' quantizer)
HEAVY = ("prefect", "hydra", "mlflow", "torch", "nncf", "catboost", "bench.peers", "tasks", "app")


def load_feeds(npz: Path) -> list[dict]:
    """The inputs the parent wrote: keys '<sample>/<input name>'."""
    import numpy as np

    out: dict[int, dict] = {}
    with np.load(npz, allow_pickle=False) as z:
        for key in z.files:
            i, name = key.split("/", 1)
            out.setdefault(int(i), {})[name] = z[key]
    return [out[i] for i in sorted(out)]


def _plugin_streams(compiled) -> dict[str, Any]:
    """What OpenVINO's plugin chose for a compiled model (as benchmark_app reports it); {} elsewhere."""
    ov = getattr(compiled, "compiled", None)
    if ov is None or not hasattr(ov, "get_property"):
        return {}
    out = {}
    for short, key in (("streams", "NUM_STREAMS"), ("threads", "INFERENCE_NUM_THREADS"),
                       ("requests", "OPTIMAL_NUMBER_OF_INFER_REQUESTS"), ("precision", "INFERENCE_PRECISION_HINT")):
        try:
            value = str(ov.get_property(key))
        except Exception:  # noqa: BLE001 - a property this version lacks
            continue
        out[short] = value.removeprefix("<Type: '").removesuffix("'>").replace("float32", "f32") \
            .replace("bfloat16", "bf16").replace("float16", "f16")
    return out


def open_config(run: Path, config: dict, concurrency: int, feed: dict) -> tuple[Callable, list[str], dict]:
    """(a thread-safe run(feeds), the input names it takes, what the runtime chose) for one
    configuration: kind "plan" (load_plan), "onnx" (a graph on runtime/precision with
    spec + setting) or "ov_ir" (an OpenVINO model file at the plugin's own precision)."""
    import onnx

    from metainfer_core.backends.paths import ExecutionPath
    from metainfer_core.backends.runtimes import runtime_of
    from metainfer_core.serving.pool import open_pool

    if config["kind"] == "plan":
        from metainfer_core.plan.deployable import load_plan

        plan = load_plan(run)       # its pool, where it serves with one, opened at load
        serving = getattr(plan, "serving", None) or {}
        inputs = list(getattr(plan, "inputs", None) or feed)     # a bucketed plan takes the feeds as they come
        return plan.run, inputs, _plugin_streams(getattr(plan, "compiled", None)) | {"setting": serving.get("setting")}
    made: list = []

    def keep(c):
        made.append(c)
        return c

    if config["kind"] == "onnx":
        model = onnx.load(str(config["file"]))
        path = ExecutionPath(config["runtime"], config.get("precision", "f32"))
        runtime = runtime_of(config["runtime"])
        compile_one = lambda over: keep(runtime.load(model, path, {**config["spec"], **over}))  # noqa: E731
        inits = {i.name for i in model.graph.initializer}
        inputs = [i.name for i in model.graph.input if i.name not in inits]
    else:
        from metainfer_core.backends.ov_backend import OpenVinoBackend, ov_core

        class PluginPrecision(OpenVinoBackend):    # bench/peers.py's ov_nncf_int8: the plugin's own precision
            def config(self, profile: bool = False) -> dict:
                return {k: v for k, v in super().config(profile).items() if k != "INFERENCE_PRECISION_HINT"}

        ov_model = ov_core().read_model(str(config["file"]))
        compile_one = lambda over: keep(PluginPrecision("peer", "measured", {**config["spec"], **over})  # noqa: E731
                                        .compile_ov(ov_model))
        inputs = [p.get_any_name() for p in ov_model.inputs]
    pool = open_pool(compile_one, config["setting"], concurrency, {k: feed[k] for k in inputs})
    return pool.run, inputs, (_plugin_streams(made[0]) if made else {}) | {"setting": config["setting"]}


def _open(run: Path, config: dict, row: dict, concurrency: int, feeds: list[dict], reference) -> tuple | None:
    """(row, run(feeds), one feed, [its LoadFigures]) for a configuration opened and scored on
    `feeds` against `reference`; None (the row's error set) where it fails to open or run."""
    import numpy as np

    from metainfer_core.accuracy.metric import plan_loss
    from metainfer_core.serving.load import LoadFigures

    stage = "open"
    try:
        t0 = time.perf_counter()
        call, inputs, chose = open_config(run, config, concurrency, feeds[0])
        row["open_s"], row["chose"] = time.perf_counter() - t0, chose
        stage = "run"
        outs = [[np.asarray(o) for o in call({k: f[k] for k in inputs})] for f in feeds]
        row["accuracy_loss"] = float(plan_loss(reference, outs))
        return row, call, {k: feeds[0][k] for k in inputs}, [LoadFigures()]
    except Exception as exc:  # noqa: BLE001 - one configuration failing is its row's error
        row["error"] = f"{stage}: {type(exc).__name__}: {str(exc).strip()[:300]}"
        return None


def serve(run: Path, configs: list[dict], feeds: list[dict], concurrency: int, duration_s: float,
          q: float, warm_s: float | None = None) -> dict[str, Any]:
    """Every configuration opened, scored and served side by side (module docstring): {configs:
    [{label, ..., accuracy_loss, chose, throughput_per_s, requests, p50_ms, p<q>_ms, error}],
    pid, heavy_modules}. A configuration that fails to open, run or serve has its error. The
    plan is opened first and again last, and its row pools both copies (`aa_ratio`: the first
    copy's requests/s over the last one's, the position's own effect)."""
    import onnx

    from metainfer_core.accuracy.metric import run_cpu
    from metainfer_core.serving.load import WARM_S, under_load

    warm_s = WARM_S if warm_s is None else warm_s
    default = onnx.load(str(run / "default.onnx"))
    reference = run_cpu(default, feeds)
    rows, live, plans = [], [], []
    for config in configs:
        row = {"error": None} | {k: v for k, v in config.items() if k not in ("spec", "file")}
        rows.append(row)
        opened = None if row["error"] else _open(run, config, row, concurrency, feeds, reference)
        if opened:
            live.append(opened)
            if config.get("kind") == "plan":
                plans.append((opened, config))
    # the plan opened again last (what is opened first ran a few % slower here): both copies' loads pooled
    again = [(entry, _open(run, config, {}, concurrency, feeds, reference)) for entry, config in plans]
    again = [(entry, copy) for entry, copy in again if copy]
    served = live + [copy for _, copy in again]
    for half in (served, served[::-1]):       # half the time in one order, half in the reverse one
        for row, call, feed, figures in half:
            if figures[0].error is None:
                figures[0] = figures[0].merged(under_load(call, feed, concurrency, duration_s / 2, warm_s))
    for (row, _, _, first), (_, _, _, last) in again:
        row["aa_ratio"] = first[0].throughput_per_s / last[0].throughput_per_s if last[0].throughput_per_s else None
        first[0] = first[0].merged(last[0])
    for row, _, _, figures in live:
        row |= figures[0].as_dict(q)
        if row["error"]:
            row["error"] = f"serve: {row['error']}"
    loaded = sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in HEAVY))
    return {"configs": rows, "pid": os.getpid(), "heavy_modules": loaded, "modules": len(sys.modules)}


def main(argv: list[str]) -> int:
    try:
        spec = json.loads(Path(argv[0]).read_text())
        out = serve(Path(spec["run"]), spec["configs"], load_feeds(Path(spec["feeds"])), int(spec["concurrency"]),
                    float(spec["duration_s"]), float(spec["percentile"]), spec.get("warm_s"))
    except Exception as exc:  # noqa: BLE001 - the parent reports it as the model's error
        out = {"pid": os.getpid(), "error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.flush()
    print(json.dumps(out, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
