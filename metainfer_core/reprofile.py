"""Re-profiling and drift detection (SPEC section 3, "stale fingerprints").

Quick validation: time one typical kernel per op type (the three most frequent op types of
the library when the versions match; every op type after a firmware/driver/runtime change)
and compare with the library; a typical kernel is one of the op type alone (no fused
epilogue, no quantize/dequantize wrappers) where there is one, so drift is put on the op type
that moved. After a version change, the kernels holding an op type whose typical kernel moved
past the threshold are re-measured under the new fingerprint version; the others' records are
carried into it (source `carried`), so the new version is complete, the check
having shown their costs unchanged. The old version's records are never touched. Drift without
a version change is reported, not re-measured: the fingerprint version is the unit of truth,
so a changed device should carry a new firmware/driver tag."""
from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

from metainfer_core.backends import Backend
from metainfer_core.backends.base import Timing
from metainfer_core.errors import MetaInferError
from metainfer_core.fingerprint.kernel_store import load_kernels
from metainfer_core.fingerprint.library import FingerprintLibrary, Measurement

QUICK_OPS = 3
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


@dataclass
class OpCheck:
    op_type: str
    kernel_key: str
    library_ms: float
    now_ms: float
    library_range: tuple[float, float] = (0.0, float("inf"))     # p10, p90
    now_range: tuple[float, float] = (0.0, float("inf"))

    @property
    def ratio(self) -> float:
        return self.now_ms / self.library_ms if self.library_ms > 0 else float("inf")

    def drifted(self, threshold: float) -> bool:
        """Past the threshold, and beyond both measurements' own spread (p10-p90 ranges apart)."""
        apart = self.now_range[0] > self.library_range[1] or self.now_range[1] < self.library_range[0]
        return abs(self.ratio - 1) > threshold and apart


@dataclass
class DriftReport:
    target: str
    old_version: str
    new_version: str
    firmware: str
    threshold: float
    checks: list[OpCheck] = field(default_factory=list)
    drifted: list[str] = field(default_factory=list)
    remeasured: int = 0
    remeasured_ops: dict[str, int] = field(default_factory=dict)    # kernels measured again, by op type
    carried: int = 0
    unmeasurable: int = 0          # records with no stored kernel to run again
    seconds: float = 0.0

    @property
    def version_changed(self) -> bool:
        return self.old_version != self.new_version

    def as_dict(self) -> dict:
        d = asdict(self)
        d["checks"] = [dict(asdict(c), ratio=c.ratio) for c in self.checks]
        d["version_changed"] = self.version_changed
        return d


def baseline_version(lib: FingerprintLibrary, backend: Backend) -> str:
    """The version to compare with: the current one if it has records, else the newest that has."""
    info = backend.info
    versions = [v for v in lib.versions(info.name) if lib.known_keys(v)]
    if info.fingerprint_version in versions:
        return info.fingerprint_version
    if not versions:
        raise MetaInferError(f"The fingerprint library has no records for target {info.name}: run "
                             f"flows/onboard.py target={info.name} (or an adapt) first, then re-profile.")
    return versions[-1]


def _pure(r: dict) -> bool:
    """A kernel of its op type alone: no quantize/dequantize wrappers, no fused epilogue. Drift
    measured on such a kernel belongs to that op type, not to a neighbour fused with it."""
    if r["op_type"] in QDQ_OPS:
        return True
    return r["dtype"] != "int8" and r["features"].get("n_ops", 1) <= 1


def _typical(records: list[dict], op: str) -> dict:
    """A typical shape of the op type: its record at the upper quartile of FLOPs (the heavier
    kernels are the ones that matter and the ones timer noise disturbs least), among the
    kernels of that op type alone when there are any."""
    recs = [r for r in records if r["op_type"] == op]
    recs = sorted([r for r in recs if _pure(r)] or recs, key=lambda r: r["features"].get("log_flops", 0.0))
    return recs[(3 * len(recs)) // 4]


def _node_ops(model) -> set[str]:
    return {n.op_type for n in model.graph.node}


def _measure(backend: Backend, model, reps: int, warmup: int) -> Timing:
    return backend.benchmark(model, reps=reps, warmup=warmup)


def reprofile(backend: Backend, lib: FingerprintLibrary, threshold: float, reps: int, warmup: int) -> DriftReport:
    t0 = time.perf_counter()
    info = backend.info
    old = baseline_version(lib, backend)
    new = lib.register_version(info)
    records = lib.records(old)
    report = DriftReport(info.name, old, new, info.firmware, threshold)
    counts = Counter(r["op_type"] for r in records)
    ops = [op for op, _ in counts.most_common(None if report.version_changed else QUICK_OPS)]
    typical = {op: _typical(records, op) for op in ops}
    kernels = load_kernels(lib, [r["kernel_key"] for r in typical.values()])
    for op, rec in typical.items():
        if rec["kernel_key"] in kernels:
            now = _measure(backend, kernels[rec["kernel_key"]], reps, warmup)
            report.checks.append(OpCheck(op, rec["kernel_key"], rec["median_ms"], now.median_ms,
                                         (rec["p10_ms"], rec["p90_ms"]), (now.p10_ms, now.p90_ms)))
    report.drifted = sorted(c.op_type for c in report.checks if c.drifted(threshold))
    if report.version_changed:
        _move_to(backend, lib, records, report, reps, warmup)
    report.seconds = time.perf_counter() - t0
    return report


def _move_to(backend: Backend, lib: FingerprintLibrary, records: list[dict], report: DriftReport, reps: int,
             warmup: int) -> None:
    """Copy the old version into the new one: every kernel that holds a drifted op type (an
    int8 Gemm holds its dequantize nodes) is measured again, the rest carried over."""
    drifted = set(report.drifted)
    kernels = load_kernels(lib, [r["kernel_key"] for r in records]) if drifted else {}
    batch = []
    for r in records:
        sig = r["signature"]
        kernel = kernels.get(r["kernel_key"])
        holds = r["op_type"] in drifted or (kernel is not None and bool(_node_ops(kernel) & drifted))
        if holds:
            if kernel is None:
                report.unmeasurable += 1
                continue
            timing, source = _measure(backend, kernel, reps, warmup), "microbench"
            report.remeasured += 1
            report.remeasured_ops[r["op_type"]] = report.remeasured_ops.get(r["op_type"], 0) + 1
        else:
            timing = Timing(r["median_ms"], r["p10_ms"], r["p90_ms"], 0, r["fallback"])
            source = "carried"
            report.carried += 1
        batch.append(Measurement(r["kernel_key"], r["op_type"], r["dtype"], "NCHW",
                                 json.dumps(sig, sort_keys=True, default=str), r["features"], timing, 0, source=source))
    lib.add(backend.info, batch)


def markdown(report: DriftReport, plans: list[dict], fine_tune: dict | None) -> str:
    lines = [f"# Re-profiling report: {report.target}", "",
             f"- fingerprint version: {report.old_version} -> {report.new_version}"
             + (" (new firmware/driver/runtime)" if report.version_changed else " (unchanged)"),
             f"- firmware: {report.firmware}", f"- drift threshold: {report.threshold:.0%}",
             f"- drifted op types: {', '.join(report.drifted) or 'none'}",
             f"- re-measured kernels: {report.remeasured}"
             + (f" ({', '.join(f'{op} {n}' for op, n in sorted(report.remeasured_ops.items()))})"
                if report.remeasured_ops else "")
             + f"; carried over unchanged: {report.carried}"
             + (f"; without a stored kernel: {report.unmeasurable}" if report.unmeasurable else ""),
             f"- time: {report.seconds:.1f} s", "", "| op type | library ms | now ms | ratio |", "|---|---|---|---|"]
    lines += [f"| {c.op_type} | {c.library_ms:.4g} | {c.now_ms:.4g} | {c.ratio:.3f} |" for c in report.checks]
    if fine_tune is not None:
        detail = (fine_tune.get("carry_over") or {}).get("reason") or fine_tune.get("reason") or ""
        lines += ["", f"Predictor of {fine_tune['version']}: {fine_tune['action']} (r{fine_tune.get('revision')})"
                  + (f": {detail}" if detail else "")]
    lines += ["", "| active plan | decision | detail |", "|---|---|---|"]
    lines += [f"| {p['registered_model']} | {p['decision']} | {p['reason']} |" for p in plans] or ["| - | - | - |"]
    return "\n".join(lines) + "\n"
