"""Second adapt on the same model and target re-uses the fingerprint library: runs
`flows/adapt.py` twice into a fresh artifacts folder and prints both runs' profile times
(from plan.json) and their ratio.

    python -m experiments.profile_reuse [target=cpu] [model=resnet_tiny]
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def adapt(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, str(ROOT / "flows" / "adapt.py"), *args], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    return json.loads(Path(out.stdout.strip().splitlines()[-1].removeprefix("plan: ")).read_text())


def main(extra: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="metainfer-bench-") as tmp:
        args = ["search=quick", f"paths.artifacts={tmp}", *extra]
        first, second = adapt(args), adapt(args)
    f, s = first["timings"]["profile_s"], second["timings"]["profile_s"]
    print(f"model {first['model']['name']} on {first['target']['name']}")
    print(f"first run : profile {f:.2f} s ({first['profile']['measured']} kernels measured)")
    print(f"second run: profile {s:.2f} s ({second['profile']['measured']} measured, {second['profile']['reused']} reused)")
    print(f"ratio second/first: {s / f:.3f}  (goal < 0.20)")


if __name__ == "__main__":
    main(sys.argv[1:])
