"""A model file's default name (issue 30): its stem when that names the model, else the nearest
distinctive folder with the stem, else the graph's name; `model.name` wins. Two different files
never share a name (and so an MLflow experiment or registry entry) by accident."""
from __future__ import annotations

import onnx
import pytest

from metainfer_core.model_name import default_model_name
from metainfer_core.zoo import build


def _save(path, graph_name="torch_jit"):
    path.parent.mkdir(parents=True, exist_ok=True)
    model = build("mlp")
    model.graph.name = graph_name
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("relative, expected", [
    ("yolov8n.onnx", "yolov8n"),                                        # a stem that names the model stays
    ("ch_PP-OCRv4_det_infer.onnx", "ch_PP-OCRv4_det_infer"),
    ("magika/models/standard_v3_3/model.onnx", "standard_v3_3_model"),  # generic stem: nearest distinctive folder
    ("minilm_l6/onnx/model_quantized.onnx", "minilm_l6_model_quantized"),
    ("bert base/onnx/model.onnx", "bert_base_model"),                   # only what folders and registries take
])
def test_default_names(tmp_path, relative, expected):
    assert default_model_name(_save(tmp_path / "x1" / relative)) == expected


def test_two_model_onnx_files_in_different_folders_get_different_names(tmp_path):
    a = default_model_name(_save(tmp_path / "x1" / "resnet" / "onnx" / "model.onnx"))
    b = default_model_name(_save(tmp_path / "x1" / "mobilenet" / "onnx" / "model.onnx"))
    assert a != b and "model" in a and "resnet" in a and "mobilenet" in b


def test_without_a_distinctive_folder_the_graph_name_or_a_path_hash_decides(tmp_path, monkeypatch):
    import metainfer_core.model_name as naming

    # as for /tmp/model.onnx: every folder above says nothing
    vague = {naming._clean(p) for p in tmp_path.parts} | {"x1", "x2"}
    generic = naming._generic
    monkeypatch.setattr(naming, "_generic", lambda name: name in vague or generic(name))
    assert default_model_name(_save(tmp_path / "x1" / "model.onnx", graph_name="crnn_ocr")) == "crnn_ocr_model"
    one = default_model_name(_save(tmp_path / "x1" / "output" / "model.onnx"))
    two = default_model_name(_save(tmp_path / "x2" / "output" / "model.onnx"))
    assert one.startswith("model_") and two.startswith("model_") and one != two


def test_model_name_given_wins_and_the_default_reaches_the_settings(settings_for, tmp_path):
    path = _save(tmp_path / "x1" / "tinynet" / "model.onnx")
    assert settings_for("model=file", f"model.path={path}").model.name == "tinynet_model"
    assert settings_for("model=file", f"model.path={path}", "model.name=my_ocr").model.name == "my_ocr"
