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
so a changed device should carry a new firmware/driver tag.

Every execution path a target offers (`cpu`: ONNX Runtime, OpenVINO f32 / bf16) is checked,
each against the records of its own fingerprint version line, with the same carry/re-measure
semantics. The default path's typical kernels are the other paths' too: a path timed on the
same kernels (the default version's stored kernel files) whose version holds no record of
one yet is *seeded* with it (measured and recorded under the path's version), so the next
re-profiling has something to compare against."""
from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

import onnx

from metainfer_core.backends import Backend
from metainfer_core.backends.base import TargetInfo, Timing
from metainfer_core.backends.paths import RUNTIMES, ExecutionPath, default_path
from metainfer_core.errors import MetaInferError
from metainfer_core.fingerprint.kernel_store import load_kernels
from metainfer_core.fingerprint.library import FingerprintLibrary, Measurement
from metainfer_core.ir.kernels import group_kernels

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
    """One execution path's drift check. The report `reprofile` returns is the default path's,
    its other paths' reports in `paths`."""
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
    path: str = "default"          # ExecutionPath.label ("onnxruntime", "openvino:bf16"); "default" on a modeled target
    runtime: str = ""
    status: str = ""               # seeded | drift | no drift | failed | not checked
    seeded: int = 0                # typical kernels recorded for the first time under this path's version
    seeded_ops: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)           # op type -> why its kernel did not run here
    paths: list["DriftReport"] = field(default_factory=list)       # the target's other execution paths

    @property
    def version_changed(self) -> bool:
        return self.old_version != self.new_version

    def all_paths(self) -> list["DriftReport"]:
        """This path's report, then the other paths'."""
        return [self, *self.paths]

    def as_dict(self) -> dict:
        d = asdict(self)
        d["checks"] = [dict(asdict(c), ratio=c.ratio) for c in self.checks]
        d["version_changed"] = self.version_changed
        d["paths"] = [p.as_dict() for p in self.paths]
        return d


def path_key(runtime: str, driver: str) -> str | None:
    """The execution path a fingerprint version belongs to, from its runtime and driver
    descriptions: "<runtime>:<precision>" for a non-default runtime (its TargetInfo.runtime
    starts with "<runtime>-", its driver names "precision=<p>"), None for the target's default
    path. Versions of the same path differ in their runtime/plugin version, ISA, settings."""
    default = default_path().runtime
    for rt in RUNTIMES:
        if rt != default and runtime.startswith(f"{rt}-"):
            fields = dict(f.split("=", 1) for f in driver.split(";") if "=" in f)
            return ExecutionPath(rt, fields.get("precision", "f32")).label
    return None


def path_label(info: TargetInfo) -> str:
    return path_key(info.runtime, info.driver) or (info.extra.get("execution_paths") or ["default"])[0]


def path_versions(lib: FingerprintLibrary, info: TargetInfo) -> list[str]:
    """The library's versions of the target on the same execution path as `info`, oldest first."""
    key = path_key(info.runtime, info.driver)
    return [v for v, runtime, driver in lib.version_paths(info.name) if path_key(runtime, driver) == key]


def baseline_version(lib: FingerprintLibrary, backend: Backend, required: bool = True) -> str | None:
    """The version to compare with: the current one if it has kernel records, else the newest of
    the same execution path that has. None (when not `required`) if there is none."""
    info = backend.info
    versions = [v for v in path_versions(lib, info) if lib.known_keys(v)]
    if info.fingerprint_version in versions:
        return info.fingerprint_version
    if not versions:
        if not required:
            return None
        raise MetaInferError(f"The fingerprint library has no records for target {info.name}: run "
                             f"flows/onboard.py target={info.name} (or an adapt) first, then re-profile.")
    return versions[-1]


def other_paths(backend: Backend) -> list[ExecutionPath]:
    """The non-default execution paths a target offers (none on a single-path target)."""
    if not hasattr(backend, "path_backend"):
        return []
    return [p for p in map(ExecutionPath.parse, backend.info.extra.get("execution_paths") or []) if not p.is_default]


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


def _why(exc: Exception) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:160]


def _check(backend: Backend, lib: FingerprintLibrary, records: list[dict], ops: list[str], report: DriftReport,
           reps: int, warmup: int, prefer: dict[str, str] | None = None) -> tuple[dict[str, dict], dict]:
    """Time the typical kernel of each op type of `ops` and compare with its record; `prefer`
    names, per op type, the kernel to take when the records hold it (the default path's)."""
    by_key = {r["kernel_key"]: r for r in records}
    typical = {}
    for op in ops:
        key = (prefer or {}).get(op)
        typical[op] = by_key[key] if key in by_key and by_key[key]["op_type"] == op else _typical(records, op)
    kernels = load_kernels(lib, [r["kernel_key"] for r in typical.values()])
    for op, rec in typical.items():
        if rec["kernel_key"] not in kernels:
            continue
        try:
            now = _measure(backend, kernels[rec["kernel_key"]], reps, warmup)
        except Exception as exc:  # noqa: BLE001 - a kernel this path cannot run any more is a finding
            report.failed[op] = _why(exc)
            continue
        report.checks.append(OpCheck(op, rec["kernel_key"], rec["median_ms"], now.median_ms,
                                     (rec["p10_ms"], rec["p90_ms"]), (now.p10_ms, now.p90_ms)))
    report.drifted = sorted(c.op_type for c in report.checks if c.drifted(report.threshold))
    return typical, kernels


def _seed(backend: Backend, lib: FingerprintLibrary, typical: dict[str, dict], kernels: dict[str, onnx.ModelProto],
          report: DriftReport, reps: int, warmup: int) -> None:
    """Measure the given typical kernels on this path and record them under its current version."""
    batch = []
    for op, rec in typical.items():
        kernel = kernels.get(rec["kernel_key"])
        if kernel is None:
            report.unmeasurable += 1
            continue
        try:
            timing = _measure(backend, kernel, reps, warmup)
        except Exception as exc:  # noqa: BLE001 - e.g. an op the path has no kernel for
            report.failed[op] = _why(exc)
            continue
        k = group_kernels(kernel)
        moved = k[0].bytes_in + k[0].bytes_weights + k[0].bytes_out if len(k) == 1 else 0
        batch.append(Measurement(rec["kernel_key"], rec["op_type"], rec["dtype"], "NCHW",
                                 json.dumps(rec["signature"], sort_keys=True, default=str), rec["features"], timing,
                                 moved))
        report.seeded_ops.append(op)
    report.seeded = lib.add(backend.info, batch)


def _reprofile_path(backend: Backend, lib: FingerprintLibrary, threshold: float, reps: int, warmup: int,
                    seed: tuple[dict[str, dict], dict] | None = None
                    ) -> tuple[DriftReport, dict[str, dict], dict]:
    """One path's check. `seed`: the default path's typical kernels (records and kernel files)
    for a non-default path, which is timed on them and seeded with those it has no record of."""
    t0 = time.perf_counter()
    info = backend.info
    old = baseline_version(lib, backend, required=seed is None)
    new = lib.register_version(info)
    report = DriftReport(info.name, old or new, new, info.firmware, threshold, path=path_label(info),
                         runtime=info.runtime)
    typical, kernels = {}, {}
    if old is not None:
        records = lib.records(old)
        counts = Counter(r["op_type"] for r in records)
        if report.version_changed:
            ops = [op for op, _ in counts.most_common()]
        elif seed is not None:              # the default path's quick set, where this path has records of it
            ops = [op for op in seed[0] if op in counts] or [op for op, _ in counts.most_common(QUICK_OPS)]
        else:
            ops = [op for op, _ in counts.most_common(QUICK_OPS)]
        prefer = {op: r["kernel_key"] for op, r in seed[0].items()} if seed is not None else None
        typical, kernels = _check(backend, lib, records, ops, report, reps, warmup, prefer)
        if report.version_changed:
            _move_to(backend, lib, records, report, reps, warmup)
    if seed is not None:
        have = lib.known_keys(new)
        missing = {op: r for op, r in seed[0].items() if r["kernel_key"] not in have}
        if missing:
            _seed(backend, lib, missing, seed[1], report, reps, warmup)
    if old is None:
        report.status = "seeded" if report.seeded else ("failed" if report.failed else "not checked")
    elif report.checks:
        report.status = "drift" if report.drifted else "no drift"
    else:
        report.status = "failed" if report.failed else "not checked"
    report.seconds = time.perf_counter() - t0
    return report, typical, kernels


def reprofile(backend: Backend, lib: FingerprintLibrary, threshold: float, reps: int, warmup: int) -> DriftReport:
    """The drift check of the target's default path, then of each other execution path it offers
    (their reports in `.paths`), each against its own fingerprint version line."""
    report, typical, kernels = _reprofile_path(backend, lib, threshold, reps, warmup)
    for path in other_paths(backend):
        report.paths.append(_reprofile_path(backend.path_backend(path), lib, threshold, reps, warmup,
                                            seed=(typical, kernels))[0])
    return report


def seed_paths(backend: Backend, lib: FingerprintLibrary, reps: int, warmup: int) -> list[DriftReport]:
    """Give every non-default path the default path's quick validation kernels (onboarding):
    the default version's typical kernels of its most frequent op types, measured on each path
    that has no record of them yet, so the first re-profiling compares instead of seeding."""
    version = baseline_version(lib, backend, required=False)
    if version is None or not other_paths(backend):
        return []
    records = lib.records(version)
    typical = {op: _typical(records, op) for op, _ in Counter(r["op_type"] for r in records).most_common(QUICK_OPS)}
    kernels = load_kernels(lib, [r["kernel_key"] for r in typical.values()])
    out = []
    for path in other_paths(backend):
        b = backend.path_backend(path)
        t0 = time.perf_counter()
        info = b.info
        new = lib.register_version(info)
        rep = DriftReport(info.name, new, new, info.firmware, 0.0, path=path.label, runtime=info.runtime)
        have = lib.known_keys(new)
        _seed(b, lib, {op: r for op, r in typical.items() if r["kernel_key"] not in have}, kernels, rep, reps, warmup)
        rep.status = "seeded" if rep.seeded else ("failed" if rep.failed else "already seeded")
        rep.seconds = time.perf_counter() - t0
        out.append(rep)
    return out


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
            try:
                timing, source = _measure(backend, kernel, reps, warmup), "microbench"
            except Exception as exc:  # noqa: BLE001 - left out of the new version, as one without a kernel
                report.failed.setdefault(r["op_type"], _why(exc))
                report.unmeasurable += 1
                continue
            report.remeasured += 1
            report.remeasured_ops[r["op_type"]] = report.remeasured_ops.get(r["op_type"], 0) + 1
        else:
            timing = Timing(r["median_ms"], r["p10_ms"], r["p90_ms"], 0, r["fallback"])
            source = "carried"
            report.carried += 1
        batch.append(Measurement(r["kernel_key"], r["op_type"], r["dtype"], "NCHW",
                                 json.dumps(sig, sort_keys=True, default=str), r["features"], timing, 0, source=source))
    lib.add(backend.info, batch)


def _version_cell(r: DriftReport) -> str:
    if r.status == "seeded" and not r.checks:
        return f"{r.new_version} (first kernel records)"
    return (f"{r.old_version} -> {r.new_version} (new version)" if r.version_changed
            else f"{r.new_version} (unchanged)")


def paths_table(report: DriftReport) -> list[str]:
    """One row per execution path: its version, status and what was re-measured, carried, seeded."""
    lines = ["| path | runtime | fingerprint version | status | checked | drifted op types | re-measured | carried "
             "| seeded |", "|---|---|---|---|---|---|---|---|---|"]
    for r in report.all_paths():
        status = r.status + "".join(f"; {op} failed: {why}" for op, why in sorted(r.failed.items()))
        lines.append(f"| {r.path} | {r.runtime} | {_version_cell(r)} | {status} | {len(r.checks)} "
                     f"| {', '.join(r.drifted) or 'none'} | {r.remeasured} | {r.carried} "
                     f"| {r.seeded}{' (' + ', '.join(r.seeded_ops) + ')' if r.seeded_ops else ''} |")
    return lines


def markdown(report: DriftReport, plans: list[dict], fine_tune: dict | None,
             path_predictors: list[dict] | None = None) -> str:
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
             f"- time: {sum(r.seconds for r in report.all_paths()):.1f} s", "", "## Execution paths", ""]
    lines += paths_table(report)
    lines += ["", "| path | op type | library ms | now ms | ratio |", "|---|---|---|---|---|"]
    lines += [f"| {r.path} | {c.op_type} | {c.library_ms:.4g} | {c.now_ms:.4g} | {c.ratio:.3f} |"
              for r in report.all_paths() for c in r.checks]
    if fine_tune is not None:
        detail = (fine_tune.get("carry_over") or {}).get("reason") or fine_tune.get("reason") or ""
        lines += ["", f"Predictor of {fine_tune['version']}: {fine_tune['action']} (r{fine_tune.get('revision')})"
                  + (f": {detail}" if detail else "")]
    for p in path_predictors or []:
        lines += ["", f"Predictor of {p['path']} ({p['version']}): {p['action']}: {p['reason']}"]
    lines += ["", "| active plan | decision | detail |", "|---|---|---|"]
    lines += [f"| {p['registered_model']} | {p['decision']} | {p['reason']} |" for p in plans] or ["| - | - | - |"]
    return "\n".join(lines) + "\n"
