"""What binding a graph to another execution path does, measured on the host: the ratio of its
warm latency there to the default path's on the same graph (interleaved rounds, as verify
times), and the accuracy loss the path adds. The predictor learns kernels on the default path;
a bound candidate's latency is its graph's prediction times this ratio.

Measured once per (path, graph class): plain float graphs, int8 graphs (ONNX Runtime's QDQ form
and OpenVINO's inputs-only form apart, each as written by meta-infer or by an outside quantizer;
dynamically quantized ones apart) and
graphs holding 16-bit floats run through different kernels on each runtime (OpenVINO runs QDQ
graphs as int8, its precision hint applies to the float parts), so each class gets its own
ratio (int8 one per set of quantized op types and activation sign, 16-bit graphs one per set of op
types computing in 16 bits: ONNX Runtime, the ratio's base, runs an fp16 scope of all
several times slower than one of compute, OpenVINO runs both at its own precision); the first graph of a class
the search binds stands for the class. A path that fails on a graph is remembered with its reason,
and candidates bound to it are pruned with that reason."""
from __future__ import annotations

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import onnx

from metainfer_core.accuracy.metric import LossFn
from metainfer_core.actions.base import has_op, infos_of
from metainfer_core.backends.base import Backend
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.backends.timing import MIN_WARM, interleaved, runs_per_sample, settle_runs, warm_up
from metainfer_core.ir.directives import INT8_ENGINE_KEY, PATH_KEY, model_meta
from metainfer_core.search.clock import WALL, Clock

ROUNDS = 5             # paired rounds timing one (path, graph class), where BUDGET_MS allows...
BUDGET_MS = 3000
# ...and more where they are cheap: five pairs of a fast graph leave its OpenVINO ratio too noisy
# to rank f32 against bf16, twenty do not and still cost well under a second
# (docs/decisions/2026-12-05-measured-reasons-from-docstrings.md)
MAX_ROUNDS, CHEAP_MS = 20, 400
PLAIN_KEPT = 4         # plain graphs kept compiled (sessions of large graphs hold their weights)
BOUND_KEPT = 8         # bound graphs' validation outputs kept (an exact check re-uses them)
READY_KEPT = 2         # graphs compiled for a path ahead of their turn, kept (each holds its weights)


@dataclass(frozen=True)
class PathCost:
    ratio: float = float("nan")        # path latency / default path latency on the same graph
    added_loss: float = 0.0
    error: str | None = None
    seconds: float = 0.0
    plain_ms: float = float("nan")     # the graph's own latency on the default path (the ratio's base)

    @property
    def path_ms(self) -> float:
        """The graph's latency on the path (as timed beside plain_ms)."""
        return self.ratio * self.plain_ms


def graph_class(model: onnx.ModelProto) -> str:
    if has_op(model, "DynamicQuantizeLinear"):     # int8_dynamic: integer kernels, activations quantized per run
        return "int8-dynamic"
    if has_op(model, "QuantizeLinear", "DequantizeLinear", "MatMulInteger"):
        return "int8" if _outputs_quantized(model) else "int8-inputs"
    half = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
    if any(i.data_type in half for i in model.graph.initializer) or any(
            a.name == "to" and a.i in half for n in model.graph.node if n.op_type == "Cast" for a in n.attribute):
        return "half"
    return "fp32"


def _outputs_quantized(model: onnx.ModelProto) -> bool:
    """Whether every quantized Conv/MatMul/Gemm writes into a QuantizeLinear (ONNX Runtime's QDQ
    form) rather than some writing float (OpenVINO's inputs-only form): the two run through
    different kernels."""
    dq = {o for n in model.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    quantized = {n.input[0] for n in model.graph.node if n.op_type == "QuantizeLinear"}
    return all(n.output[0] in quantized for n in model.graph.node
               if n.op_type in ("Conv", "MatMul", "Gemm") and set(n.input) & dq)


def quantized_ops(model: onnx.ModelProto) -> tuple[str, ...]:
    """The op types that read int8 data (through a DequantizeLinear). int8 is timed per set
    (scope compute vs all differ most on OpenVINO's form: ONNX Runtime, the ratio's base, runs
    neither form's extra quantized ops fused)."""
    dq = {o for n in model.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    return tuple(sorted({n.op_type for n in model.graph.node if n.op_type != "QuantizeLinear" and set(n.input) & dq}))


def signed_activations(model: onnx.ModelProto) -> bool:
    """Whether some QuantizeLinear writes signed int8 (its zero point's type)."""
    signed = {i.name for i in model.graph.initializer if i.data_type == onnx.TensorProto.INT8}
    return any(len(n.input) > 2 and n.input[2] in signed for n in model.graph.node if n.op_type == "QuantizeLinear")


def half_ops(model: onnx.ModelProto) -> tuple[str, ...]:
    """The op types that read a 16-bit float tensor (an fp16 scope's footprint)."""
    half = {n for n, i in infos_of(model).items() if i.dtype == np.float16}
    half |= {i.name for i in model.graph.initializer
             if i.data_type in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)}
    return tuple(sorted({n.op_type for n in model.graph.node if n.op_type != "Cast" and set(n.input) & half}))


def rebound(model: onnx.ModelProto, path: ExecutionPath) -> onnx.ModelProto:
    """`model` bound to `path` instead (as the binding action writes it)."""
    out = unbound(model)
    path.write_to(out)
    return out


def unbound(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    keep = [p for p in out.metadata_props if p.key != PATH_KEY]
    del out.metadata_props[:]
    out.metadata_props.extend(keep)
    return out


class PathCosts:
    def __init__(self, backend: Backend, feeds: list[dict[str, np.ndarray]], reference, loss_fn: LossFn,
                 rounds: int = ROUNDS, clock: Clock = WALL):
        """clock: what its `seconds` are read on (the search's budget prices them)."""
        self.backend, self.feeds, self.reference, self.loss_fn, self.rounds = backend, feeds, reference, loss_fn, rounds
        self.clock = clock
        self._costs: dict[tuple[ExecutionPath, str, tuple[str, ...]], PathCost] = {}
        self._plain: dict[str, tuple] = {}     # unbound graph digest -> (compiled, its loss, ms per run)
        self._known: dict[str, list] = {}      # graph digest -> its outputs on the default path, known already
        self._outputs: dict[tuple, list] = {}  # (unbound digest, path) -> its validation outputs on the path
        self._ready: dict[tuple, tuple] = {}   # (unbound digest, path) -> (compiled, outputs) ahead of its turn
        self.seconds = 0.0

    def know(self, model: onnx.ModelProto, outputs: list[list[np.ndarray]]) -> None:
        """`model`'s validation outputs on the default path are `outputs` (the default plan's are
        the reference): binding that graph needs no validation runs on the default path."""
        self._known[_digest(unbound(model))] = outputs

    @property
    def measured(self) -> dict[str, dict]:
        """For plan.json: each measured (path, graph class) and what it cost."""
        return {f"{p.label}|{k}" + (f"[{','.join(ops)}]" if ops else ""): {"ratio": c.ratio, "added_loss": c.added_loss, "error": c.error,
                                   "seconds": round(c.seconds, 2)} for (p, k, ops), c in self._costs.items()}

    def run(self, model: onnx.ModelProto) -> list[list[np.ndarray]]:
        """The validation outputs of `model` on its own path (those of a graph this measured
        re-used: compiling a QDQ graph on OpenVINO can take seconds, the runs milliseconds)."""
        outputs = self._outputs.get((_digest(unbound(model)), ExecutionPath.of(model)))
        if outputs is None:
            c = self.backend.compile(model)
            outputs = [c.run(f) for f in self.feeds]
        return outputs

    @staticmethod
    def key(path: ExecutionPath, model: onnx.ModelProto) -> tuple:
        """What binding `model` to `path` is measured and remembered as: (path, graph class, op types)."""
        kind = graph_class(model)
        # an outside quantizer's graph (NNCF's, ONNX Runtime's) runs otherwise than meta-infer's
        # of the same form (other Q/DQ placement)
        engine = model_meta(model, INT8_ENGINE_KEY) if kind.startswith("int8") else None
        kind += f"-{engine}" if engine else ""
        if kind.startswith("int8") and kind != "int8-dynamic":
            # ONNX Runtime runs signed int8 activations through slower kernels than unsigned
            return path, kind + ("-s8" if signed_activations(model) else ""), quantized_ops(model)
        return path, kind, half_ops(model) if kind == "half" else ()

    @staticmethod
    def family(model: onnx.ModelProto) -> tuple:
        """The graph class `model` is timed as, on any path."""
        return PathCosts.key(ExecutionPath(), model)[1:]

    def knows(self, path: ExecutionPath, model: onnx.ModelProto) -> bool:
        """Whether binding `model` (its graph) to `path` is already measured."""
        return self.key(path, model) in self._costs

    def ratio(self, path: ExecutionPath, kind: str = "fp32") -> float | None:
        """The measured ratio of `path` on the graph class `kind` (plain float by default), if any."""
        c = self._costs.get((path, kind, ()))
        return c.ratio if c is not None and c.error is None else None

    def cost(self, model: onnx.ModelProto) -> PathCost:
        key = self.key(ExecutionPath.of(model), model)
        if key not in self._costs:
            self._costs[key] = self._measure(model)
        return self._costs[key]

    def _measure(self, model: onnx.ModelProto) -> PathCost:
        t0 = self.clock.now()
        plain = None
        try:
            graph = unbound(model)
            digest = _digest(graph)     # the graph's, whatever the path (once: a large graph's bytes)
            plain, plain_loss, run_ms = self._on_default_path(graph, digest)
            settle = settle_runs(self.backend)
            rounds = paired_rounds(run_ms, settle, self.rounds)
            bound, outputs = self._bound(model, digest)
            _keep(self._outputs, (digest, ExecutionPath.of(model)), outputs, BOUND_KEPT)
            added = self.loss_fn(self.reference, outputs) - plain_loss
            base, there = interleaved([plain, bound], [self.feeds[0]] * 2, rounds, settle)
        except Exception as exc:  # noqa: BLE001 - a path that cannot run this graph prunes its candidates only
            # the graph still anchors its plans on the default path (else fp16 graphs that OpenVINO
            # rejects were predicted several times too slow there)
            plain_ms = float(np.median(interleaved([plain], [self.feeds[0]], rounds, settle)[0])) \
                if plain is not None else float("nan")
            spent = self.clock.now() - t0
            self.seconds += spent
            return PathCost(error=f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}",
                            seconds=spent, plain_ms=plain_ms)
        spent = self.clock.now() - t0
        self.seconds += spent
        ratio = float(np.median(np.asarray(there) / np.maximum(np.asarray(base), 1e-9)))
        return PathCost(ratio, max(0.0, float(added)), None, spent, float(np.median(base)))

    def _bound(self, model: onnx.ModelProto, digest: str) -> tuple:
        """`model` compiled on its path and its validation outputs there. The same graph bound to
        each other path not yet measured for its class compiles beside it (the search binds a
        graph to every path offered, one after the other, and OpenVINO compiles largely on one
        core: two paths' compiles side by side take clearly less than one after the other);
        all are compiled before anything is timed. digest: the unbound graph's."""
        ready = self._ready.pop((digest, ExecutionPath.of(model)), None)
        if ready is not None:
            return ready
        others = [p for p in getattr(self.backend, "paths", ()) if not p.is_default
                  and p != ExecutionPath.of(model) and not self.knows(p, model)]
        with ThreadPoolExecutor(max_workers=max(1, len(others))) as pool:
            futures = {p: pool.submit(self.backend.compile, rebound(model, p)) for p in others}
            compiled = self.backend.compile(model)
        # the graphs run one after the other, never from two threads at once: two threads in
        # OpenVINO's Python infer() (its input copy) have deadlocked each other for good
        out = compiled, [compiled.run(f) for f in self.feeds]
        for p, f in futures.items():
            if f.exception() is None:       # a failure is met again when that path is measured
                try:
                    sibling = f.result()
                    _keep(self._ready, (digest, p), (sibling, [sibling.run(x) for x in self.feeds]), READY_KEPT)
                except Exception:  # noqa: BLE001 - as a failed compile: met again when that path is measured
                    pass
        return out

    def _on_default_path(self, model: onnx.ModelProto, digest: str) -> tuple:
        """The graph compiled on the default path, its loss on the validation inputs and its ms
        per run; kept per graph, since each path the search binds one graph to is timed against
        the same plain graph (a slow model's validation runs take seconds). digest: `model`'s."""
        if digest not in self._plain:
            plain = self.backend.compile(model)
            known = self._known.get(digest)
            t_run = time.perf_counter()
            outputs = known if known is not None else [plain.run(f) for f in self.feeds]
            run_ms = (time.perf_counter() - t_run) * 1e3 / len(self.feeds)     # replaced below where known
            if known is not None or len(self.feeds) < MIN_WARM:
                # else its first runs are its ratio's base: an int8 graph whose outputs were
                # known had its OpenVINO plans predicted well below what they ran in
                run_ms = warm_up(plain, self.feeds[0])
            _keep(self._plain, digest, (plain, self.loss_fn(self.reference, outputs), run_ms), PLAIN_KEPT)
        return self._plain[digest]


def paired_rounds(run_ms: float, settle: int, least: int = ROUNDS) -> int:
    """Paired rounds for a graph of `run_ms`: a slow graph gets fewer (a ranking needs the ratio
    to ~10 %, not verify's precision), a fast one more, while they are cheap."""
    pair_ms = max(run_ms * 2 * runs_per_sample(run_ms, settle), 1e-3)
    return max(2, min(int(BUDGET_MS / pair_ms), max(least, min(MAX_ROUNDS, int(CHEAP_MS / pair_ms)))))


def _keep(kept: dict, key, value, most: int) -> None:
    """`kept[key] = value`, the oldest entry dropped first where `most` are kept already."""
    if key not in kept and len(kept) >= most:
        kept.pop(next(iter(kept)))
    kept[key] = value


def _digest(model: onnx.ModelProto) -> str:
    return hashlib.sha1(model.SerializeToString(deterministic=True)).hexdigest()
