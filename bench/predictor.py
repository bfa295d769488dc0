"""Leave-one-model-out validation of the performance predictor (issue 5), for `cpu`
(measured) and each modeled target: builds each target's training set from the zoo (kernel
micro-benchmarks and whole-model runs of every candidate plan) in a fresh library, then for
each zoo model trains without it and scores its candidate plans. Prints, per target, MAPE of
whole-model latency, the share of plans within +-10 %, mean Spearman over each model's
candidate plans, the same for the default plans alone, kernel-level MAPE on the left-out
micro-benchmarks, and the seconds spent; then per model.

    python -m bench.predictor [targets...] [--artifacts DIR] [--retest]   (default: all five, a temp folder)

--retest: on a measured target, time every zoo plan again after the build and compare with
the stored runs: how far the labels themselves move (the noise floor no predictor can beat),
for the median and for the 10th percentile the predictor learns on measured targets
(predictor/model/labels.py), and the two timings' Spearman per model (the ranking a perfect
predictor would reach). The figures are judged against that 10th percentile there.

Goals: cpu >= 90 % within +-10 % and Spearman >= 0.9; modeled targets >= 95 % within +-10 %.
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from app.compose import load_settings, zoo_input_shapes
from metainfer_core import zoo
from metainfer_core.backends import backend_for
from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.predictor import TargetSpec, kernel_params
from metainfer_core.predictor.dataset.plans import candidate_plans
from metainfer_core.predictor.dataset.training_set import build, measure_plans, zoo_entries
from metainfer_core.predictor.lifecycle.validation import leave_one_model_out

TARGETS = ["cpu", "gpu", "npu", "fpga", "asic"]


def retest(s, backend, library: FingerprintLibrary, version: str, entries) -> str:
    """Every stored zoo plan timed again now, all in the same interleaved rounds as the build."""
    stored = {(r["model"], r["plan_key"]): r for r in library.plan_runs(version, source="zoo")}
    pairs = []
    for e in entries:
        for p in candidate_plans(e.model, s.action_space.domains(), backend.info, e.feeds, s.predictor.plan_depth,
                                 s.predictor.max_plans):
            if (e.name, p.key) in stored:
                pairs.append((e, p, stored[(e.name, p.key)]))
    again = measure_plans(backend, [p.model for _, p, _ in pairs], [e.feeds[0] for e, _, _ in pairs], s.predictor.runs,
                          s.predictor.warmup)
    out = []
    for stat in ("median_ms", "p10_ms"):
        dev = np.array([abs(getattr(t, stat) / r[stat] - 1) for (_, _, r), t in zip(pairs, again) if t is not None])
        out.append(f"{stat.removesuffix('_ms')}: {dev.mean():.1%} apart, {np.mean(dev <= 0.1):.0%} within ±10 %")
    # the two timings' rank agreement over each model's plans: the Spearman a perfect predictor would reach
    by_model: dict[str, list[tuple[float, float]]] = {}
    for (e, _, r), t in zip(pairs, again):
        if t is not None:
            by_model.setdefault(e.name, []).append((r["p10_ms"], t.p10_ms))
    rhos = {m: spearmanr(*zip(*v)).statistic for m, v in by_model.items() if len(v) >= 3}
    out.append("p10 Spearman, stored vs again: mean " + f"{np.mean(list(rhos.values())):.3f} ("
               + ", ".join(f"{m} {v:.2f}" for m, v in sorted(rhos.items())) + ")")
    return f"labels timed again ({len(pairs)} plans): " + "; ".join(out)


def run_target(target: str, artifacts: Path, again: bool = False) -> tuple[dict, dict, float, float]:
    """(overall figures, per-model figures, build s, validation s); with `again` on a measured
    target the overall figures also hold "retest", how far the labels moved (retest)."""
    s, _ = load_settings([f"target={target}", f"paths.artifacts={artifacts}"])
    shapes = zoo_input_shapes(zoo.names())
    backend = backend_for(s)
    library = FingerprintLibrary(s.tracking.fingerprint_db)
    p = s.predictor
    t0 = time.perf_counter()
    report = build(backend, library, zoo_entries(shapes, s.seed, s.verify.samples), s.action_space.domains(),
                   s.profile.batch_gradient, s.profile.reps, s.profile.warmup, p.runs, p.plan_depth, p.max_plans,
                   lambda m: print(f"  [{target}] {m}", file=sys.stderr, flush=True), plan_warmup=p.warmup)
    build_s = time.perf_counter() - t0
    version = report.fingerprint_version
    noise = ""
    if again and s.target.measurement == "measured":
        noise = retest(s, backend, library, version, zoo_entries(shapes, s.seed, s.verify.samples))
        print(f"  [{target}] {noise}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    result = leave_one_model_out(library.training_records(version), library.plan_runs(version, source="zoo"),
                                 TargetSpec.from_spec(target, s.target.spec),
                                 kernel_params(p.iterations, p.learning_rate, p.depth), p.ridge, s.seed)
    metrics = dict(result.metrics, **({"retest": noise} if noise else {}))
    return metrics, result.per_model, build_s, time.perf_counter() - t0


def main(argv: list[str]) -> None:
    artifacts = None
    if "--artifacts" in argv:
        i = argv.index("--artifacts")
        artifacts = Path(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    again = "--retest" in argv
    argv = [a for a in argv if a != "--retest"]
    targets = argv or TARGETS
    rows, details, notes = [], [], []
    with tempfile.TemporaryDirectory(prefix="metainfer-bench-predictor-") as tmp:
        for t in targets:
            m, per_model, build_s, lomo_s = run_target(t, (artifacts or Path(tmp)) / t, again)
            if m.get("retest"):
                notes.append(f"{t}: {m['retest']}")
            rows.append(f"| {t} | {m['models']} / {m['plans']} | {m['mape']:.1%} | {m['within_10']:.0%} "
                        f"| {m['spearman_mean']:.3f} | {m['default_mape']:.1%} | {m['default_within_10']:.0%} "
                        f"| {m['kernel_mape']:.1%} | {build_s:.0f} / {lomo_s:.0f} |")
            print(rows[-1], file=sys.stderr, flush=True)
            for name, d in per_model.items():
                details.append(f"| {t} | {name} | {d['plans']} | {d['mape']:.1%} | {d['within_10']:.0%} "
                               f"| {d['spearman']:.3f} | {d['default_error']:+.1%} |")
    print("| target | models / plans | MAPE | within ±10 % | mean Spearman | default MAPE | default within ±10 % "
          "| kernel MAPE | build / validate s |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    print("| target | held-out model | plans | MAPE | within ±10 % | Spearman | default plan error |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(details))
    if notes:
        print()
        print("\n".join(notes))


if __name__ == "__main__":
    main(sys.argv[1:])
