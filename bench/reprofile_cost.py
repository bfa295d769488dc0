"""Re-profiling cost with and without drift (issue 8), side by side in one run: a full profile of
zoo models into an empty library, a re-profile with no drift (quick check only), and a
re-profile after a simulated firmware change that slows two op types by 30 %.

    python bench/reprofile_cost.py [target]      (default: cpu; modeled targets drift by firmware)
"""
from __future__ import annotations

import sys
import tempfile
import time

import yaml

from metainfer_core.backends import create_backend
from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.fingerprint.profiler import profile
from metainfer_core.onboard import zoo_models
from metainfer_core.reprofile import reprofile
from tasks.compose import CONF_DIR


def backend(target: str, **spec):
    cfg = yaml.safe_load((CONF_DIR / "target" / f"{target}.yaml").read_text())
    return create_backend(cfg["_target_"], cfg["name"], cfg["measurement"], {**cfg["spec"], **spec})


def main(target: str) -> None:
    models = zoo_models()[:3]
    with tempfile.TemporaryDirectory(prefix="metainfer-bench-") as tmp:
        lib = FingerprintLibrary(f"sqlite:///{tmp}/fp.db")
        t0 = time.perf_counter()
        full = profile(backend(target), lib, models, [1, 2, 4], reps=30, warmup=5)
        full_s = time.perf_counter() - t0
        quiet = reprofile(backend(target), lib, threshold=0.1, reps=30, warmup=5)
        print(f"target {target}: full profile {full_s:.2f} s ({full.measured} kernels)")
        print(f"re-profile, no drift: {quiet.seconds:.2f} s, {len(quiet.checks)} checks, {quiet.remeasured} re-measured"
              f" -> ratio {quiet.seconds / full_s:.3f} (goal < 0.20)")
        if target != "cpu":
            slow = backend(target, firmware="bench-fw-2", op_slowdown={"Conv": 1.3, "Relu": 1.3})
            drift = reprofile(slow, lib, threshold=0.1, reps=30, warmup=5)
            print(f"re-profile, new firmware slowing Conv and Relu by 30 %: {drift.seconds:.2f} s, drifted "
                  f"{drift.drifted}, {drift.remeasured} re-measured, {drift.carried} carried "
                  f"-> ratio {drift.seconds / full_s:.3f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
