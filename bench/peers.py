"""The runtimes a user would pick instead of meta-infer, one small class per runtime kind, each
with `run(feeds) -> list[np.ndarray]` and `time_once(feeds) -> ms` (what metainfer_core.backends.timing.
interleaved times), plus `measure()`, which builds them, scores their accuracy against the fp32
reference with `plan_loss` and times them together with verify's method (interleaved rounds,
each starting at the next peer, `settle` warm runs before each timed one, median).

Peers (label: what it is):
    ort_default   ONNX Runtime as the `cpu` target's backend compiles it (CPUExecutionProvider,
                  1 intra-op thread, ORT_ENABLE_ALL); the ORT peers below run the same way
    ort_static    ORT quantize_static: QDQ, QUInt8 activations / QInt8 weights, per_channel=True,
                  calibrated on the same inputs
    ort_dynamic   ORT quantize_dynamic (defaults)
    ov_default    OpenVINO CPU plugin at its default inference precision (bf16 where the CPU has
                  AMX/AVX512-BF16), 1 thread, LATENCY hint, 1 stream: compiled and timed by the
                  `cpu` target's OpenVINO backend, as a plan bound to OpenVINO is; the OV peers
                  below run the same way
    ov_f32        the same with INFERENCE_PRECISION_HINT f32
    ov_nncf_int8  NNCF's int8 post-training quantization (calibrated on the same inputs),
                  compiled like ov_default
    ov_nncf_aac   NNCF's accuracy-aware int8 (nncf.quantize_with_accuracy_control): int8, then
                  the layers that cost most accuracy reverted to float until the loss on the same
                  inputs (plan_loss against the same reference) is within max_drop =
                  accuracy.max_loss; capped (AAC_ITERATIONS reverts, layers ranked on at most
                  AAC_RANKING_SUBSET inputs, in a process ended after AAC_TIMEOUT_S) because
                  its ranking takes minutes on a large detector; compiled at f32 precision, as
                  NNCF validates it
    meta_infer    meta-infer's plan: metainfer_core.plan.deployable.load_plan(run folder) when that module
                  exists, else the plan's model.onnx on ONNX Runtime as ort_default runs it

A peer that fails to convert, compile or run becomes {"error": "<stage>: <reason>"}; it never
stops the others. The labels and table names are bench/labels.py's; bench/time_peers.py times the
peers alone.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import io
import multiprocessing
import tempfile
import time
from pathlib import Path
from typing import Callable, Protocol

import numpy as np
import onnx
import onnxruntime as ort

from bench.labels import AAC_ITERATIONS, AAC_RANKING_SUBSET, AAC_TIMEOUT_S, PEERS
from metainfer_core.accuracy.metric import plan_loss, run_cpu
from metainfer_core.actions.nncf_engine import quiet_nncf  # noqa: F401 - telemetry off, log down
from metainfer_core.actions.ort_engine import quantize_static_qdq, quiet_quantizer
from metainfer_core.backends.host import HostBackend
from metainfer_core.backends.ort_backend import OrtBackend
from metainfer_core.backends.ov_backend import OpenVinoBackend, ov_core, read_onnx
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.backends.timing import SETTLE, interleaved


Feeds = dict[str, np.ndarray]


class Peer(Protocol):
    path: dict
    compile_s: float

    def run(self, feeds: Feeds) -> list[np.ndarray]: ...

    def time_once(self, feeds: Feeds) -> float: ...


def short(exc: BaseException, limit: int = 160) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {(lines[0] if lines else '')[:limit]}"


def precision_of(model: onnx.ModelProto) -> str:
    """What a plan computes in, read from its graph: int8 (QDQ or integer ops), fp16, else fp32."""
    ops = {n.op_type for n in model.graph.node}
    if ops & {"QuantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul", "MatMulInteger",
              "ConvInteger"}:
        return "int8"
    f16 = onnx.TensorProto.FLOAT16
    if any(t.data_type == f16 for t in model.graph.initializer) or any(
            a.t.data_type == f16 for n in model.graph.node for a in n.attribute if a.name == "to" and a.i == f16):
        return "fp16"
    return "fp32"


# --- ONNX Runtime ---------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _cpu_spec() -> dict:
    """The `cpu` target's spec as an adapt with the defaults composes it: the serving group's
    threads included (conf/target/cpu.yaml names none), so the peers run at a plan's threads."""
    from app.compose import target_backend

    return dict(target_backend("cpu").spec)


@functools.lru_cache(maxsize=1)
def cpu_backend() -> OrtBackend:
    """The `cpu` target's default path (conf/target/cpu.yaml: ONNX Runtime, CPUExecutionProvider,
    1 intra-op thread, ORT_ENABLE_ALL): the backend verify compiles an unbound plan on."""
    return OrtBackend(name="cpu", measurement="measured", spec=_cpu_spec())


class OrtPeer:
    """A graph compiled and timed by the `cpu` target's ONNX Runtime backend (cpu_backend)."""

    def __init__(self, model: onnx.ModelProto, precision: str | None = None):
        self.compiled = cpu_backend().compile(model)
        self.compile_s = self.compiled.compile_s
        self.path = {"runtime": f"onnxruntime-{ort.__version__}", "precision": precision or precision_of(model)}

    def run(self, feeds: Feeds) -> list[np.ndarray]:
        return self.compiled.run(feeds)

    def time_once(self, feeds: Feeds) -> float:
        return self.compiled.time_once(feeds)


def ort_quantized(default: onnx.ModelProto, feeds: list[Feeds] | None) -> onnx.ModelProto:
    """quantize_static (QDQ, QUInt8/QInt8, per channel, calibrated on `feeds`: the same call as
    int8's engine onnxruntime), or quantize_dynamic (its defaults) when feeds is None."""
    from onnxruntime.quantization import quantize_dynamic

    if feeds is not None:
        return quantize_static_qdq(default, feeds, "QUInt8", "QInt8", per_channel=True)
    with tempfile.TemporaryDirectory(prefix="metainfer-ortq-") as tmp:
        src, dst = Path(tmp) / "default.onnx", Path(tmp) / "quantized.onnx"
        onnx.save(default, src)
        with quiet_quantizer():
            quantize_dynamic(src, dst)
        return onnx.load(dst)


# --- OpenVINO -------------------------------------------------------------------------------

class _PluginPrecision(OpenVinoBackend):
    """OpenVINO at the CPU plugin's own inference precision (bf16 where the CPU has a datapath for
    it): the backend's settings less its precision hint, which a plan always sets."""

    def config(self, profile: bool = False) -> dict:
        return {k: v for k, v in super().config(profile).items() if k != "INFERENCE_PRECISION_HINT"}


@functools.lru_cache(maxsize=None)
def ov_cpu_backend(precision: str | None = None) -> OpenVinoBackend:
    """The `cpu` target's OpenVINO path as a plan bound to it compiles (conf/target/cpu.yaml: its
    threads, performance hint, one stream) at INFERENCE_PRECISION_HINT `precision` (f32, or bf16
    where the CPU offers it); None: the plugin's default precision."""
    f32 = HostBackend(name="cpu", measurement="measured", spec=_cpu_spec()).path_backend(
        ExecutionPath("openvino", precision or "f32"))
    return f32 if precision else _PluginPrecision(f32.name, f32.measurement, f32.spec, f32.seed)


def ov_read(model: onnx.ModelProto, feeds: Feeds):
    """The ONNX model as the OpenVINO backend reads it, reshaped to the feeds' shapes."""
    return read_onnx(model.SerializeToString(), {name: list(v.shape) for name, v in feeds.items()})


def nncf_int8(ov_model, feeds: list[Feeds]):
    """NNCF post-training int8 quantization, calibrated on `feeds` (all of them). Its progress bars
    (rich, not the logger) go nowhere."""
    nncf = quiet_nncf()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return nncf.quantize(ov_model, nncf.Dataset(feeds), subset_size=len(feeds))


def nncf_accuracy_aware(ov_model, feeds: list[Feeds], reference: list[list[np.ndarray]], max_loss: float):
    """nncf.quantize_with_accuracy_control calibrated on `feeds` and validated on them with the
    suite's own metric: minus plan_loss against `reference` (NNCF wants higher = better), per
    input too, so max_drop = max_loss bounds the same loss the other peers are judged by."""
    nncf = quiet_nncf()
    from nncf.quantization.advanced_parameters import AdvancedAccuracyRestorerParameters

    def outputs(compiled, feed: Feeds) -> list[np.ndarray]:
        res = compiled(feed)
        return [np.asarray(res[o]) for o in compiled.outputs]

    def validate(compiled, items):
        losses = [plan_loss([reference[i]], [outputs(compiled, feed)]) for i, feed in items]
        return -max(losses, default=0.0), [-x for x in losses]

    caps = AdvancedAccuracyRestorerParameters(max_num_iterations=AAC_ITERATIONS,
                                              ranking_subset_size=min(len(feeds), AAC_RANKING_SUBSET))
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return nncf.quantize_with_accuracy_control(
            ov_model, nncf.Dataset(feeds), nncf.Dataset(list(enumerate(feeds)), lambda item: item[1]), validate,
            max_drop=max_loss, subset_size=len(feeds), advanced_accuracy_restorer_parameters=caps)


def _accuracy_aware_child(model_bytes: bytes, feeds: list[Feeds], reference, max_loss: float, folder: str) -> None:
    """nncf_accuracy_aware in a spawned process: the result saved as folder/aac.xml (+ .bin), or
    the failure's one line in folder/error.txt."""
    try:
        import openvino as ov
        result = nncf_accuracy_aware(ov_read(onnx.load_from_string(model_bytes), feeds[0]), feeds, reference, max_loss)
        ov.save_model(result, str(Path(folder) / "aac.xml"), compress_to_fp16=False)
    except Exception as exc:  # noqa: BLE001 - reported by the parent as this peer's error
        (Path(folder) / "error.txt").write_text(short(exc))


def nncf_accuracy_aware_capped(default: onnx.ModelProto, feeds: list[Feeds], reference: list[list[np.ndarray]],
                               max_loss: float, timeout_s: float = AAC_TIMEOUT_S):
    """nncf_accuracy_aware on `default`, ended after `timeout_s` (TimeoutError): it runs in a
    spawned process, and its model comes back through a temporary folder, read into memory."""
    import openvino as ov

    with tempfile.TemporaryDirectory(prefix="metainfer-aac-") as tmp:
        proc = multiprocessing.get_context("spawn").Process(
            target=_accuracy_aware_child, args=(default.SerializeToString(), feeds, reference, max_loss, tmp))
        proc.start()
        proc.join(timeout_s)
        if proc.is_alive():
            proc.kill()
            proc.join()
            raise TimeoutError(f"NNCF's accuracy control ran past {timeout_s:.0f} s (AAC_TIMEOUT_S) and was ended")
        error, xml = Path(tmp) / "error.txt", Path(tmp) / "aac.xml"
        if error.is_file():
            raise RuntimeError(error.read_text())
        if not xml.is_file():
            raise RuntimeError(f"NNCF's accuracy control process ended with exit code {proc.exitcode} and no model")
        weights = np.fromfile(xml.with_suffix(".bin"), np.uint8)
        return ov_core().read_model(xml.read_text(), ov.Tensor(weights))


class OpenVinoPeer:
    """An OpenVINO model compiled and timed by the `cpu` target's OpenVINO backend (ov_cpu_backend);
    `precision` forces INFERENCE_PRECISION_HINT (None: the plugin's default)."""

    def __init__(self, ov_model, precision: str | None = None):
        backend = ov_cpu_backend(precision)
        self.compiled = backend.compile_ov(ov_model)
        self.compile_s = self.compiled.compile_s
        hint = str(self.compiled.compiled.get_property("INFERENCE_PRECISION_HINT"))
        int8 = any(op.get_type_name() == "FakeQuantize" for op in ov_model.get_ops())
        self.path = {"runtime": backend.info.runtime,
                     "precision": ("int8+" if int8 else "") + hint.removeprefix("<Type: '").removesuffix("'>")
                     .replace("bfloat16", "bf16").replace("float32", "f32").replace("float16", "f16")}

    def run(self, feeds: Feeds) -> list[np.ndarray]:
        return self.compiled.run(feeds)

    def time_once(self, feeds: Feeds) -> float:
        return self.compiled.time_once(feeds)


# --- meta-infer's plan ----------------------------------------------------------------------

class PlanPeer:
    """meta-infer's deployed plan: metainfer_core.plan.deployable.load_plan(run_folder) when that module is
    importable (its `.path` says which runtime and precision), else the run's model.onnx on ONNX
    Runtime (`plan`, or run_folder/model.onnx)."""

    def __init__(self, run_folder: str | Path | None = None, plan: onnx.ModelProto | None = None):
        t0 = time.perf_counter()
        if run_folder is not None and importlib.util.find_spec("metainfer_core.plan.deployable") is not None:
            self._impl = importlib.import_module("metainfer_core.plan.deployable").load_plan(run_folder)
            self.path = dict(self._impl.path) | {"loader": "deployable.load_plan",
                                                 "graph": precision_of(onnx.load(Path(run_folder) / "model.onnx"))}
        else:
            if plan is None:
                if run_folder is None:
                    raise ValueError("neither a run folder nor a plan model")
                plan = onnx.load(Path(run_folder) / "model.onnx")
            self._impl = OrtPeer(plan)
            self.path = self._impl.path | {"loader": "model.onnx", "graph": self._impl.path["precision"]}
        self.compile_s = time.perf_counter() - t0

    def run(self, feeds: Feeds) -> list[np.ndarray]:
        return [np.asarray(o) for o in self._impl.run(feeds)]

    def time_once(self, feeds: Feeds) -> float:
        return float(self._impl.time_once(feeds))


# --- building and timing --------------------------------------------------------------------

def builders(default: onnx.ModelProto, feeds: list[Feeds], labels=PEERS, max_loss: float = 0.01,
             reference: list[list[np.ndarray]] | None = None) -> dict[str, Callable[[], Peer]]:
    """{label: a function that converts and compiles that peer of `default`}, in column order;
    `max_loss` is the accuracy-aware peer's bound, `reference` the fp32 outputs on `feeds`
    (computed when not given)."""
    ov_model = lambda: ov_read(default, feeds[0])  # noqa: E731 - read afresh per peer (quantize changes it)
    ref = lambda: reference if reference is not None else run_cpu(default, feeds)  # noqa: E731
    table = {"ort_default": lambda: OrtPeer(default),
             "ort_static": lambda: OrtPeer(ort_quantized(default, feeds), "int8"),
             "ort_dynamic": lambda: OrtPeer(ort_quantized(default, None), "int8"),
             "ov_default": lambda: OpenVinoPeer(ov_model()),
             "ov_f32": lambda: OpenVinoPeer(ov_model(), "f32"),
             "ov_nncf_int8": lambda: OpenVinoPeer(nncf_int8(ov_model(), feeds)),
             "ov_nncf_aac": lambda: OpenVinoPeer(nncf_accuracy_aware_capped(default, feeds, ref(), max_loss), "f32")}
    return {k: table[k] for k in labels}


MIN_TIMED_S = 1.5      # fast models get more rounds: a 0.1 ms model's 30 rounds are within its noise


def more_rounds(live: list, feed: Feeds, rounds: int, settle: int, min_timed_s: float = MIN_TIMED_S) -> int:
    """`rounds`, or more (up to 20x) where that many would time less than `min_timed_s` in all."""
    per_round_s = float(np.nansum([g.time_once(feed) for _, g in live])) * (1 + settle) / 1e3
    if per_round_s <= 0:
        return rounds
    return int(max(rounds, min(20 * rounds, min_timed_s / per_round_s)))


class _Guarded:
    """A peer inside the timing loop: the first exception is kept and the peer drops out
    (time_once returns NaN at once) instead of stopping the others."""

    def __init__(self, peer: Peer):
        self.peer, self.error = peer, None

    def time_once(self, feeds: Feeds) -> float:
        if self.error is None:
            try:
                return self.peer.time_once(feeds)
            except Exception as exc:  # noqa: BLE001
                self.error = f"timing: {short(exc)}"
        return float("nan")


def measure(build: dict[str, Callable[[], Peer]], feeds: list[Feeds], reference: list[list[np.ndarray]],
            rounds: int, warmup: int = 3, settle: int = SETTLE, min_timed_s: float = MIN_TIMED_S) -> dict[str, dict]:
    """Build every peer (a failure is that peer's result), score it with plan_loss on all feeds,
    warm it up, then time all of them interleaved on feeds[0], in `rounds` rounds or more where
    those would time under `min_timed_s` in all (more_rounds). Returns {label: {label, latency_ms,
    p90_ms, samples_ms, accuracy_loss, compile_s, path, error}}; error None or '<stage>: <reason>'."""
    out: dict[str, dict] = {}
    live: list[tuple[str, _Guarded]] = []
    for label, make in build.items():
        row = {"label": label, "latency_ms": None, "p90_ms": None, "accuracy_loss": None, "compile_s": None,
               "path": None, "error": None}
        out[label] = row
        stage = "convert/compile"
        try:
            t0 = time.perf_counter()
            peer = make()
            row["compile_s"], row["path"] = time.perf_counter() - t0, peer.path
            stage = "run"
            row["accuracy_loss"] = float(plan_loss(reference, [peer.run(f) for f in feeds]))
            for _ in range(warmup):
                peer.time_once(feeds[0])
            live.append((label, _Guarded(peer)))
        except Exception as exc:  # noqa: BLE001 - a peer that does not run is a result, not a crash
            row["error"] = f"{stage}: {short(exc)}"
    samples = interleaved([g for _, g in live], [feeds[0]] * len(live), more_rounds(live, feeds[0], rounds, settle,
                                                                               min_timed_s), settle)
    for (label, g), xs in zip(live, samples):
        row = out[label]
        if g.error:
            row["error"] = g.error
            continue
        row |= {"latency_ms": float(np.median(xs)), "p90_ms": float(np.percentile(xs, 90)), "samples_ms": xs}
    return out


def ratios(results: dict[str, dict], base: str = "ort_default") -> dict[str, float | None]:
    """{label: base latency / that peer's latency} (None where either has none)."""
    b = (results.get(base) or {}).get("latency_ms")
    return {k: (b / v["latency_ms"] if b and v.get("latency_ms") else None) for k, v in results.items()}
