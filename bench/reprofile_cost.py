"""Re-profiling cost with and without drift (issue 8), side by side in one run: a full profile of
zoo models into an empty library, a re-profile with no drift (quick check only), and a
re-profile under a new fingerprint version: a simulated firmware change that slows two op types
by 30 % on a modeled target, two intra-op threads instead of one on `cpu`.

    python -m bench.reprofile_cost [target]      (default: cpu; modeled targets drift by firmware)
"""
from __future__ import annotations

import sys
import tempfile
import time

from app.compose import target_backend
from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.fingerprint.onboard import zoo_models
from metainfer_core.fingerprint.profiler import profile
from metainfer_core.fingerprint.reprofile import reprofile


def backend(target: str, **spec):
    return target_backend(target, **spec)


def measure(target: str, n_models: int = 3, reps: int = 30, warmup: int = 5) -> dict:
    """Full profile of the first n_models zoo models into an empty library, then a re-profile
    with no drift, then one under a new fingerprint version (see below). Seconds and counts of
    each, side by side."""
    models = zoo_models()[:n_models]
    out: dict = {"target": target, "models": n_models}
    with tempfile.TemporaryDirectory(prefix="metainfer-bench-") as tmp:
        lib = FingerprintLibrary(f"sqlite:///{tmp}/fp.db")
        t0 = time.perf_counter()
        full = profile(backend(target), lib, models, [1, 2, 4], reps=reps, warmup=warmup)
        out["full_s"], out["full_kernels"] = time.perf_counter() - t0, full.measured
        quiet = reprofile(backend(target), lib, threshold=0.1, reps=reps, warmup=warmup)
        out["quiet"] = {"seconds": quiet.seconds, "checks": len(quiet.checks), "remeasured": quiet.remeasured,
                        "drifted": list(quiet.drifted)}
        # a new fingerprint version: on a modeled target a firmware that slows two op types; on
        # cpu a runtime setting (2 intra-op threads), which changes real kernel times by itself
        changed, out["change"] = ((backend(target, intra_op_threads=2), "intra_op_threads 1 -> 2") if target == "cpu"
                                  else (backend(target, firmware="bench-fw-2", op_slowdown={"Conv": 1.3, "Relu": 1.3}),
                                        "firmware slowing Conv and Relu by 30 %"))
        drift = reprofile(changed, lib, threshold=0.1, reps=reps, warmup=warmup)
        out["drift"] = {"seconds": drift.seconds, "checks": len(drift.checks), "remeasured": drift.remeasured,
                        "carried": drift.carried, "drifted": list(drift.drifted)}
    return out


def main(target: str) -> None:
    r = measure(target)
    q = r["quiet"]
    print(f"target {target}: full profile {r['full_s']:.2f} s ({r['full_kernels']} kernels)")
    print(f"re-profile, no drift: {q['seconds']:.2f} s, {q['checks']} checks, {q['remeasured']} re-measured"
          f" -> ratio {q['seconds'] / r['full_s']:.3f} (goal < 0.20)")
    if "drift" in r:
        d = r["drift"]
        print(f"re-profile after {r['change']}: {d['seconds']:.2f} s, drifted "
              f"{d['drifted']}, {d['remeasured']} re-measured, {d['carried']} carried "
              f"-> ratio {d['seconds'] / r['full_s']:.3f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
