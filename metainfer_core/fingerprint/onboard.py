"""New-hardware onboarding checklist (SPEC section 3): supported ops, dtypes and quantization;
micro-benchmarks of the zoo's 20 most frequent ops over a shape gradient; one minimal model end
to end; peak memory within the device limit; 1..N concurrent instances of a representative model
(up to the cores; throughput must not fall as instances are added); firmware and
driver recorded. Each item passes or fails with a one-line detail."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import onnx

from metainfer_core import zoo
from metainfer_core.accuracy.metric import plan_loss, run_cpu
from metainfer_core.backends import Backend
from metainfer_core.fingerprint import FingerprintLibrary, concurrency
from metainfer_core.fingerprint.profiler import kernel_model, profile
from metainfer_core.ir.kernels import group_kernels
from metainfer_core.ir.tensors import random_feeds, tensor_infos
from metainfer_core.normalize import normalize

TOP_OPS = 20
MINIMAL_MODEL = "minimal_mlp"


@dataclass
class Item:
    name: str
    passed: bool
    detail: str
    data: dict = field(default_factory=dict)


def zoo_models(batch: int = 1) -> list[onnx.ModelProto]:
    """The zoo, normalized with its symbolic batch bound."""
    models = []
    for name in zoo.names():
        m = zoo.build(name)
        shapes = {i.name: [batch] + [d.dim_value for d in i.type.tensor_type.shape.dim[1:]] for i in m.graph.input}
        models.append(normalize(m, shapes).model)
    return models


def minimal_model() -> onnx.ModelProto:
    """The smallest end-to-end model: MatMul + Add + Relu, MatMul + Add, 64 -> 64 -> 10, at batch 1
    (19 KB of fp32 weights: it fits even a microcontroller NPU's working memory, which the zoo's
    mlp, 1.3 MB of weights, does not)."""
    from metainfer_core.zoo._builder import GraphBuilder

    b = GraphBuilder(MINIMAL_MODEL, 0)
    x = b.relu(b.linear(b.input("input", [64]), 64, 64, gain=2.0))
    return normalize(b.model({"logits": b.linear(x, 64, 10)}), {"input": [1, 64]}).model


def frequent_ops(models: list[onnx.ModelProto], top: int = TOP_OPS) -> list[str]:
    counts = Counter(n.op_type for m in models for n in m.graph.node)
    return [op for op, _ in counts.most_common(top)]


def check_capabilities(backend: Backend, models: list[onnx.ModelProto], ops: list[str]) -> Item:
    """Run one real kernel of each frequent op on the target; report what it supports."""
    info = backend.info
    runs, fails = {}, {}
    for op in ops:
        for m in models:
            infos = tensor_infos(m)
            k = next((k for k in group_kernels(m, infos) if k.op_type == op), None)
            if k is None:
                continue
            try:
                t = backend.benchmark(kernel_model(m, k, infos), reps=3, warmup=1)
                runs[op] = "host fallback" if t.fallback else "device"
            except Exception as exc:  # noqa: BLE001 - an op the target refuses is a finding, not a crash
                fails[op] = str(exc).splitlines()[0][:120]
            break
    on_device = sorted(op for op, where in runs.items() if where == "device")
    detail = (f"{len(on_device)}/{len(ops)} frequent ops run on the device, {len(runs) - len(on_device)} fall back "
              f"to the host, {len(fails)} fail; dtypes {list(info.dtypes)}; quantization {list(info.quantization)}")
    return Item("capabilities", bool(runs) and bool(info.dtypes), detail,
                {"ops": runs, "failed": fails, "dtypes": list(info.dtypes), "quantization": list(info.quantization),
                 "supported_ops": list(info.supported_ops) if info.supported_ops else "all"})


def check_microbench(backend: Backend, library: FingerprintLibrary, models: list[onnx.ModelProto], ops: list[str],
                     gradient: list[int], reps: int, warmup: int) -> Item:
    # keep only the frequent ops' nodes' kernels: other kernels are measured when a model needs them
    report = profile(backend, library, models, gradient, reps, warmup, op_filter=set(ops))
    covered = {r["op_type"].split("+")[0] for r in library.records(report.fingerprint_version)}
    missing = [op for op in ops if op not in covered]
    return Item("microbench", not missing,
                f"{report.measured} kernels measured, {report.reused} already in library "
                f"{report.fingerprint_version} ({report.seconds:.1f}s)" + (f"; no record for {missing}" if missing else ""),
                {"measured": report.measured, "reused": report.reused, "missing": missing,
                 "skipped": report.skipped[:20]})


def check_minimal_model(backend: Backend, model: onnx.ModelProto, runs: int = 20) -> tuple[Item, Item]:
    feeds = [random_feeds(model, seed=i) for i in range(2)]
    reference = run_cpu(model, feeds)
    compiled = backend.compile(model)
    loss = plan_loss(reference, [compiled.run(f) for f in feeds])
    times = [compiled.time_once(feeds[0]) for _ in range(runs)]
    e2e = Item("minimal_model", loss <= 1e-4,
               f"{MINIMAL_MODEL}: compile {compiled.compile_s * 1e3:.1f} ms, median {np.median(times):.4g} ms, "
               f"accuracy loss vs CPU reference {loss:.2e}",
               {"compile_s": compiled.compile_s, "latency_ms": float(np.median(times)), "accuracy_loss": loss})
    peak, limit = compiled.peak_memory(feeds[0]), backend.info.memory_limit_bytes
    mem = Item("memory", peak <= limit,
               f"peak {peak} B {'within' if peak <= limit else 'EXCEEDS'} the device limit {limit} B"
               + ("" if peak <= limit else ": the minimal model does not fit; check memory_limit_bytes in the "
                  "target spec or the device"), {"peak_mem_bytes": peak, "limit_bytes": limit})
    return e2e, mem


def representative_model() -> onnx.ModelProto:
    """A model a service would run (a small residual CNN of the zoo), for the concurrency item."""
    return normalize(zoo.build("resnet_tiny"), None).model


def check_concurrency(backend: Backend, model: onnx.ModelProto, duration_s: float = concurrency.DURATION_S) -> Item:
    """Throughput, latency percentiles, scaling efficiency and power with 1..N instances
    (fingerprint/concurrency.py); fails where adding instances loses throughput."""
    rows = [concurrency.measure(backend, model, n, duration_s) for n in concurrency.instance_counts(backend)]
    passed, detail = concurrency.verdict(rows)
    return Item("concurrency", passed, detail, {str(r["instances"]): r for r in rows})


def check_execution_paths(backend: Backend, model: onnx.ModelProto, runs: int = 10,
                          library: FingerprintLibrary | None = None, reps: int = 5, warmup: int = 1) -> Item:
    """Every execution path the target offers runs the minimal model: its version (a fingerprint
    version of its own), latency and accuracy loss against the CPU reference. With the library
    (after the micro-benchmarks), each non-default path is seeded with the default path's quick
    validation kernels, so re-profiling has its drift baseline (reprofile.seed_paths)."""
    from metainfer_core.actions import ACTIONS
    from metainfer_core.backends.paths import ExecutionPath, missing_paths

    labels = backend.info.extra.get("execution_paths") or ["default"]     # a modeled device: its own path
    feeds = [random_feeds(model, seed=i) for i in range(2)]
    reference = run_cpu(model, feeds)
    rows, failed = {}, {}
    for label in labels:
        path = ExecutionPath() if label == "default" else ExecutionPath.parse(label)
        try:
            bound = model if path.is_default else ACTIONS["binding"].apply(model, None, path.as_dict(), None)
            compiled = backend.compile(bound)
            loss = plan_loss(reference, [compiled.run(f) for f in feeds])
            times = [compiled.time_once(feeds[0]) for _ in range(runs)]
            info = backend.info if path.is_default else backend.path_backend(path).info
            rows[label] = {"runtime": info.runtime, "fingerprint_version": info.fingerprint_version,
                           "latency_ms": float(np.median(times)), "accuracy_loss": loss}
        except Exception as exc:  # noqa: BLE001 - a path that cannot run is a finding
            failed[label] = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
    if library is not None and len(labels) > 1:
        from metainfer_core.fingerprint.reprofile import seed_paths

        for seeded in seed_paths(backend, library, reps, warmup):
            if seeded.path in rows:
                rows[seeded.path]["drift_baseline"] = {"status": seeded.status, "kernels": seeded.seeded,
                                                       "ops": seeded.seeded_ops, "failed": seeded.failed}
    missing = missing_paths(backend.spec)
    detail = "; ".join(f"{k}: {r['runtime']}, {r['latency_ms']:.4g} ms, loss {r['accuracy_loss']:.1e}"
                       + (f", drift baseline {r['drift_baseline']['status']} ({r['drift_baseline']['kernels']} kernels)"
                          if "drift_baseline" in r else "") for k, r in rows.items())
    detail += "".join(f"; {k} FAILED ({v})" for k, v in failed.items())
    detail += f"; not installed: {missing}" if missing else ""
    return Item("execution_paths", bool(rows) and not failed, detail, {"paths": rows, "failed": failed,
                                                                       "not_installed": missing})


def check_versions(backend: Backend) -> Item:
    info = backend.info
    ok = all([info.firmware, info.driver, info.runtime])
    return Item("versions", ok, f"firmware {info.firmware}; driver {info.driver}; runtime {info.runtime}; "
                                f"fingerprint version {info.fingerprint_version}", info.as_dict())


def markdown(target: str, measurement: str, items: list[Item]) -> str:
    lines = [f"# Onboarding report: {target} ({measurement})", "",
             "Latencies of a modeled target are simulated from its spec, not measured." if measurement == "modeled"
             else "Latencies are measured on this machine.", "", "| item | result | detail |", "|---|---|---|"]
    lines += [f"| {i.name} | {'PASS' if i.passed else 'FAIL'} | {i.detail} |" for i in items]
    return "\n".join(lines) + "\n"
