"""What real exporters write, through the whole normalize stage: opset 9-11 operator forms, the
pre-11 Resize coordinate mapping, -1 dims, weights listed as inputs (IR 3), Loop bodies reading
outer tensors, external-data weights, models without value_info or node names."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from metainfer_core import zoo
from metainfer_core.errors import MetaInferError
from metainfer_core.normalize import load_model, normalize
from metainfer_core.normalize.shapes import unbound_inputs

from .graphs import const, op_types, value, weights


def _raw(nodes, inputs, outputs, inits=(), opset=11, ir=6) -> onnx.ModelProto:
    """A model as an exporter writes it: no value_info, no shape inference run."""
    graph = helper.make_graph(nodes, "exported", inputs, outputs, list(inits))
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    built.ir_version = ir
    onnx.checker.check_model(built)
    return built


def test_opset_11_resize_clip_pad_forms():
    """Resize with an empty roi constant, scales or sizes; Clip with min/max inputs (one left out);
    Pad with pads and value as inputs: all come out equivalent, Constant nodes folded away."""
    nodes = [
        helper.make_node("Constant", [], ["roi"], value=const("roi", np.array([], np.float32))),
        helper.make_node("Constant", [], ["scales"], value=const("s", np.array([1, 1, 2, 2], np.float32))),
        helper.make_node("Resize", ["x", "roi", "scales"], ["up"], mode="nearest"),
        helper.make_node("Resize", ["x", "roi", "roi", "sizes"], ["up2"], mode="linear",
                         coordinate_transformation_mode="align_corners"),
        helper.make_node("Constant", [], ["lo"], value=const("lo", np.array(0, np.float32))),
        helper.make_node("Constant", [], ["hi"], value=const("hi", np.array(6, np.float32))),
        helper.make_node("Clip", ["up", "lo", "hi"], ["c1"]),
        helper.make_node("Clip", ["up2", "", "hi"], ["c2"]),
        helper.make_node("Add", ["c1", "c2"], ["sum"]),
        helper.make_node("Pad", ["sum", "pads", "pad_value"], ["y"], mode="constant"),
    ]
    inits = [
        const("sizes", np.array([1, 3, 8, 8], np.int64)),
        const("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
        const("pad_value", np.array(0.5, np.float32)),
    ]
    before = _raw(nodes, [value("x", [1, 3, 4, 4])], [value("y", [1, 3, 10, 10])], inits)
    result = normalize(before)
    assert op_types(result.model) == ["Resize", "Resize", "Clip", "Clip", "Add", "Pad"]
    assert result.opset_from == 11 and result.max_abs_err["y"] < 1e-5


def _old_resize(opset: int, op: str, mode: str, scales: list[float]) -> onnx.ModelProto:
    if opset < 9:  # Upsample-7 takes its scales as an attribute
        node, inits = helper.make_node(op, ["x"], ["y"], mode=mode, scales=scales), []
    else:
        node = helper.make_node(op, ["x", "scales"], ["y"], mode=mode)
        inits = [const("scales", np.array(scales, np.float32))]
    ir = 3 if opset < 9 else 5
    return _raw([node], [value("x", [1, 2, 7, 9])], [value("y", [1, 2, "h", "w"])], inits, opset, ir)


@pytest.mark.parametrize(
    ("opset", "op", "mode", "scales"),
    [
        (10, "Resize", "linear", [1, 1, 2, 2]),  # half_pixel would shift it by up to the full range
        (10, "Resize", "nearest", [1, 1, 3, 1.5]),
        (10, "Resize", "nearest", [1, 1, 0.6, 0.5]),  # downsampling rounds up
        (10, "Resize", "linear", [1, 1, 2.5, 0.75]),
        (9, "Upsample", "linear", [1, 1, 3, 1.5]),
        (7, "Upsample", "nearest", [1, 1, 3, 1.5]),
    ],
)
def test_pre_11_resize_keeps_its_old_coordinate_mapping(opset, op, mode, scales):
    result = normalize(_old_resize(opset, op, mode, scales))
    resize = result.model.graph.node[0]
    assert resize.op_type == "Resize" and result.max_abs_err["y"] < 1e-5
    attrs = {a.name: helper.get_attribute_value(a) for a in resize.attribute}
    assert attrs["coordinate_transformation_mode"] == b"asymmetric"


def test_pre_11_nearest_resize_both_growing_and_shrinking_is_refused_by_name():
    model = _old_resize(10, "Resize", "nearest", [1, 1, 2.5, 0.75])
    model.graph.node[0].name = "up_down"
    with pytest.raises(MetaInferError, match=r"Node 'up_down' .*enlarges some axes and shrinks others"):
        normalize(model)


def test_minus_one_dims_read_as_unknown_and_bind():
    """Paddle2ONNX writes -1 for a dynamic axis (PP-OCR's classifier input is [-1, 3, ?, ?])."""
    shape = onnx.TensorShapeProto()
    for size in (-1, 3, None, None):
        dim = shape.dim.add()
        if size is not None:
            dim.dim_value = size
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    x.type.tensor_type.shape.CopyFrom(shape)
    before = _raw([helper.make_node("Relu", ["x"], ["y"])], [x], [value("y", [-1, 3, "h", "w"])])
    assert unbound_inputs(before, None) == {"x": ["?", 3, "?", "?"]}
    assert unbound_inputs(before, {"x": [2, 3, 8, 8]}) == {}
    assert normalize(before).symbolic_dims == {"x": ["?", 3, "?", "?"]}
    assert normalize(before, input_shapes={"x": [2, 3, 8, 8]}).symbolic_dims == {"x": [2, 3, 8, 8]}


def test_ir3_weights_listed_as_inputs():
    """Before IR 4 every initializer had to be a graph input too."""
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    before = _raw(nodes, [value("x", [1, 3, 4, 4]), value("W", [2, 3, 1, 1])], [value("y", [1, 2, 4, 4])],
                  [const("W", weights([2, 3, 1, 1]))], opset=8, ir=3)
    result = normalize(before)
    assert op_types(result.model) == ["Conv", "Relu"] and [i.name for i in result.model.graph.input] == ["x"]
    assert result.max_abs_err["y"] == 0.0


def test_loop_body_reading_outer_tensors_and_holding_constants():
    """Loop adding an outer-scope Identity output three times; the body has its own Constant."""
    body = helper.make_graph(
        [
            helper.make_node("Constant", [], ["half"], value=const("half", np.array(0.5, np.float32))),
            helper.make_node("Mul", ["step", "half"], ["scaled"]),
            helper.make_node("Add", ["acc", "scaled"], ["acc_out"]),
            helper.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        "body",
        [value("i", [], TensorProto.INT64), value("cond", [], TensorProto.BOOL), value("acc", [2, 3])],
        [value("cond_out", [], TensorProto.BOOL), value("acc_out", [2, 3])],
    )
    nodes = [
        helper.make_node("Identity", ["x"], ["step"]),
        helper.make_node("Constant", [], ["trips"], value=const("trips", np.array(3, np.int64))),
        helper.make_node("Loop", ["trips", "", "x"], ["y"], body=body),
    ]
    result = normalize(_raw(nodes, [value("x", [2, 3])], [value("y", [2, 3])], opset=13, ir=7))
    assert op_types(result.model) == ["Loop"]
    assert result.max_abs_err["y"] < 1e-6


def test_external_data_weights_without_value_info_or_names(tmp_path):
    """A zoo model saved as exporters do for big models (weights beside the .onnx), stripped of
    value_info and node names: it loads and normalizes exactly like the in-memory model."""
    original = zoo.build("resnet_tiny", seed=0)
    stripped = onnx.ModelProto()
    stripped.CopyFrom(original)
    del stripped.graph.value_info[:]
    for node in stripped.graph.node:
        node.name = ""
    path = tmp_path / "resnet.onnx"
    onnx.save(stripped, path, save_as_external_data=True, location="resnet.weights", size_threshold=0)
    assert (tmp_path / "resnet.weights").stat().st_size > path.stat().st_size
    loaded = normalize(load_model(path))
    reference = normalize(original)
    assert loaded.nodes_after == reference.nodes_after
    assert op_types(loaded.model) == op_types(reference.model)
    names = [n.name for n in loaded.model.graph.node]
    assert all(names) and len(set(names)) == len(names)
    assert loaded.max_abs_err["logits"] < 1e-4


def test_dynamic_dim_that_cannot_be_one_asks_for_a_binding():
    """The equivalence check runs unbound dims at size 1; a model that needs more says so."""
    nodes = [helper.make_node("Reshape", ["x", "pair"], ["y"])]
    before = _raw(nodes, [value("x", ["N", 3])], [value("y", [2, 3])], [const("pair", np.array([2, 3], np.int64))])
    with pytest.raises(MetaInferError, match=r"could not run the original model.*model\.input_shapes"):
        normalize(before)
    assert normalize(before, input_shapes={"x": [2, 3]}).max_abs_err == {"y": 0.0}
