import pytest
from onnx import helper

from metainfer_core.errors import MetaInferError
from metainfer_core.normalize.shapes import (
    bind_input_shapes,
    check_complete,
    infer_shapes,
    symbolic_inputs,
    unbound_inputs,
)

from .graphs import growing_loop, model, value


def _dynamic():
    return model([helper.make_node("Relu", ["x"], ["y"])], [value("x", ["N", 3, "H"])], [value("y", None)])


def test_binding_sets_symbolic_dims_and_inference_follows():
    bound = infer_shapes(bind_input_shapes(_dynamic(), {"x": [2, 3, 7]}))
    assert symbolic_inputs(bound) == {"x": [2, 3, 7]}
    assert symbolic_inputs(_dynamic()) == {"x": ["N", 3, "H"]}
    assert [d.dim_value for d in bound.graph.output[0].type.tensor_type.shape.dim] == [2, 3, 7]


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ({"image": [1, 3, 4]}, r"names input 'image'.*inputs are \['x'\]"),
        ({"x": [1, 3]}, r"rank 2 .*declares rank 3 \(\[N, 3, H\]\)"),
        ({"x": [1, 4, 5]}, r"size 4 on axis 1.*fixes that axis to 3"),
        ({"x": [1, 3, -5]}, r"positive integer"),
    ],
)
def test_bad_bindings_are_refused(shapes, message):
    with pytest.raises(MetaInferError, match=message):
        bind_input_shapes(_dynamic(), shapes)


def test_incomplete_tensor_is_named_with_its_producer():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["t"], name="r"), helper.make_node("Neg", ["t"], ["y"], name="n")],
        "g",
        [value("x", [2])],
        [value("y", [2])],
    )
    unchecked = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(MetaInferError, match=r"Tensor 't' \(output 0 of node 'r' \(Relu\)\) has an unknown dtype and rank"):
        check_complete(unchecked)
    check_complete(infer_shapes(unchecked))


def test_scan_and_loop_bodies_do_not_break_inference():
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "xi"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["scan_out"])],
        "body",
        [value("s", [3]), value("xi", [3])],
        [value("s_out", [3]), value("scan_out", [3])],
    )
    scan = helper.make_node("Scan", ["init", "x"], ["final", "ys"], body=body, num_scan_inputs=1)
    inferred = infer_shapes(model([scan], [value("x", ["T", 3]), value("init", [3])], [value("final", None), value("ys", None)]))
    check_complete(inferred)
    assert symbolic_inputs(inferred)["x"] == ["T", 3]

    inferred = infer_shapes(growing_loop())
    with pytest.raises(MetaInferError, match=r"Tensor 'y' \(output 0 of node \(unnamed, producing 'y'\) \(Loop\)\) has an unknown rank"):
        check_complete(inferred)


def test_unbound_inputs_are_what_binding_leaves_dynamic():
    two = model([helper.make_node("Add", ["x", "z"], ["y"])], [value("x", ["N", 3, "H"]), value("z", None)], [value("y", None)])
    assert unbound_inputs(two, None) == {"x": ["N", 3, "H"], "z": None}  # None: rank unknown
    assert unbound_inputs(two, {"x": [1, 3, 5]}) == {"z": None}
    assert unbound_inputs(two, {"x": [1, 3, 5], "z": [1]}) == {}
