import numpy as np
import onnx
import pytest
from onnx import helper

from metainfer_core.errors import MetaInferError
from metainfer_core.normalize import load_model

from .graphs import const, model, value, weights


def _weighted_model() -> onnx.ModelProto:
    return model(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        [value("x", [2, 64])],
        [value("y", [2, 64])],
        [const("W", weights([64, 64]))],
    )


def test_loads_a_model_with_external_weights(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_weighted_model(), path, save_as_external_data=True, location="m.data", size_threshold=0)
    loaded = load_model(path)
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(loaded.graph.initializer[0]), weights([64, 64]))


def test_missing_external_weights_name_tensor_and_file(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_weighted_model(), path, save_as_external_data=True, location="m.data", size_threshold=0)
    (tmp_path / "m.data").unlink()
    with pytest.raises(MetaInferError, match=r"Weight 'W' .*m\.data.* does not exist"):
        load_model(path)


def test_missing_file(tmp_path):
    with pytest.raises(MetaInferError, match="does not exist"):
        load_model(tmp_path / "nope.onnx")


def test_text_file_is_not_onnx(tmp_path):
    path = tmp_path / "notes.onnx"
    path.write_text("this is not a model\n" * 20)
    with pytest.raises(MetaInferError, match="not a readable ONNX model|empty ONNX graph"):
        load_model(path)


def test_truncated_file(tmp_path):
    data = _weighted_model().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(MetaInferError, match="corrupt|truncated"):
        load_model(path)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(MetaInferError, match="empty ONNX graph"):
        load_model(path)
