"""model.shape_range: its syntax, its checks against the model, the tuned shape, the derived
range, the points a plan is verified at, and the refusal of shapes outside it."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from metainfer_core.errors import MetaInferError
from metainfer_core.normalize.shape_range import (
    DimRange,
    check_against_model,
    derived_ranges,
    describe,
    from_json,
    outside,
    parse_shape_range,
    points,
    to_json,
    tuned_shapes,
)

from .graphs import const, model, value


def _seq_model() -> onnx.ModelProto:
    """x [N, seq] and mask [N, seq] (sharing both symbols), image [1, 3, H, W], a weight input."""
    nodes = [helper.make_node("Mul", ["x", "mask"], ["y"]), helper.make_node("Add", ["image", "w"], ["z"])]
    inputs = [value("x", ["N", "seq"]), value("mask", ["N", "seq"]), value("image", [1, 3, "H", "W"]),
              value("w", [1])]
    return model(nodes, inputs, [value("y", None), value("z", None)], [const("w", np.ones(1, np.float32))])


# --- DimRange --------------------------------------------------------------------------------


def test_dim_range_basics():
    assert DimRange(8, 8).fixed and not DimRange(8, 128).fixed
    assert DimRange(8, 128).contains(8) and DimRange(8, 128).contains(128) and not DimRange(8, 128).contains(129)
    stepped = DimRange(160, 1280, 32)
    assert stepped.contains(192) and not stepped.contains(170) and not stepped.contains(128)
    assert (str(DimRange(8, 8)), str(DimRange(8, 128)), str(stepped)) == ("8", "[8, 128]", "[160, 1280, step 32]")


@pytest.mark.parametrize("r, middle", [
    (DimRange(8, 128), 68),
    (DimRange(1, 8), 4),                # 4.5: tie to the lower
    (DimRange(160, 1280, 32), 704),     # 720 lies between 704 and 736: tie to the lower
    (DimRange(0 + 1, 1 + 3 * 4, 3), 7),  # 1, 4, 7, 10, 13: 7 is the middle
    (DimRange(10, 20, 10), 10),         # 15: tie between the two grid points
    (DimRange(5, 5), 5),
])
def test_middle_is_on_the_grid_nearest_the_centre(r, middle):
    assert r.middle() == middle
    assert r.contains(r.middle())


# --- parse_shape_range -----------------------------------------------------------------------


def test_parse_good_forms():
    ranges = parse_shape_range({"x": [[1, 8], 3, 48, [160, 1280, 32]], "mask": (1, [8, 128])})
    assert ranges == {"x": [DimRange(1, 8), DimRange(3, 3), DimRange(48, 48), DimRange(160, 1280, 32)],
                      "mask": [DimRange(1, 1), DimRange(8, 128)]}
    # a [n, n] or [n, n, step] dim is fixed and has no step: it equals the plain int
    assert parse_shape_range({"x": [[4, 4, 2]]}) == parse_shape_range({"x": [4]}) == {"x": [DimRange(4, 4)]}
    assert parse_shape_range({}) == {}


@pytest.mark.parametrize("raw, message", [
    ({"x": [1, [128, 8]]}, "model.shape_range.x axis 1: [128, 8] has min 128 above max 8; write [min, max], "
                           "e.g. [8, 128]"),
    ({"x": [0, 3]}, "model.shape_range.x axis 0: 0 is not a size; sizes start at 1"),
    ({"x": [1, [0, 8]]}, "axis 1: [0, 8] has min 0; sizes start at 1, write e.g. [1, 8]"),
    ({"x": [1, [8, 128, 0]]}, "axis 1: [8, 128, 0] has step 0"),
    ({"x": [1, [8, 128, 7]]}, "max - min = 120, not a multiple of the step 7; make it one, e.g. [8, 127, 7]"),
    ({"x": [1, [8]]}, "axis 1: [8] has 1 entries; write [min, max] or [min, max, step]"),
    ({"x": [1, [1, 2, 3, 4]]}, "has 4 entries"),
    ({"x": [1, [8, True]]}, "axis 1: [8, True] holds something other than whole numbers"),
    ({"x": [True, 3]}, "axis 0: True is not a size"),
    ({"x": [1, 8.0]}, "axis 1: 8.0 is not a size; write an int, [min, max] or [min, max, step]"),
    ({"x": [1, [8.0, 16]]}, "holds something other than whole numbers"),
    ({"x": [1, "seq"]}, "axis 1: 'seq' is not a size"),
    ({"x": 5}, "model.shape_range.x=5 is not a list of dims"),
    ([1, 2], "must map each input name to its dims"),
])
def test_parse_refuses_each_bad_form_naming_input_and_axis(raw, message):
    with pytest.raises(ValueError) as exc:
        parse_shape_range(raw)
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


# --- check_against_model ---------------------------------------------------------------------


def test_check_accepts_ranges_the_model_can_take():
    ranges = parse_shape_range({"x": [[1, 4], [8, 128]], "mask": [[1, 4], [8, 128]],
                                "image": [1, 3, [160, 640, 32], [160, 640, 32]]})
    assert check_against_model(_seq_model(), ranges, {"x": [1, 64], "image": [1, 3, 320, 320]}) is ranges


@pytest.mark.parametrize("raw, shapes, pattern", [
    ({"w": [1]}, None, r"names input 'w', but the inputs the model is fed are \['image', 'mask', 'x'\]"),
    ({"y": [1]}, None, r"names input 'y'"),
    ({"x": [1, [8, 128], 2]}, None, r"gives input 'x' rank 3 \(\[1, 8\.\.128, 2\]\), but the model declares rank 2 "
                                    r"\(\[N, seq\]\)"),
    ({"image": [1, [1, 8], 32, 32]}, None, r"'image' \[1, 8\] on axis 1, but the model fixes that axis to 3 "
                                           r"\(\[1, 3, H, W\]\); write 3 there"),
    ({"image": [[1, 2], 3, 32, 32]}, None, r"on axis 0, but the model fixes that axis to 1"),
    ({"x": [1, [8, 128]], "mask": [1, [8, 64]]}, None,
     r"input 'x' \[8, 128\] on axis 1 but input 'mask' \[8, 64\] on axis 1; the model names both dims 'seq'"),
    ({"x": [1, [8, 128]]}, {"x": [1, 256]},
     r"model.input_shapes gives input 'x' size 256 on axis 1, outside its model.shape_range \[8, 128\]"),
    ({"image": [1, 3, [160, 640, 32], 320]}, {"image": [1, 3, 170, 320]}, r"size 170 on axis 2.*\[160, 640, step 32\]"),
    ({"x": [1, [8, 128]]}, {"x": [1, 2, 64]}, r"model.input_shapes gives input 'x' rank 3"),
])
def test_check_refuses_what_the_model_cannot_serve(raw, shapes, pattern):
    with pytest.raises(MetaInferError, match=pattern) as exc:
        check_against_model(_seq_model(), parse_shape_range(raw), shapes)
    assert "\n" not in str(exc.value)


def test_unknown_dims_take_any_range():
    """-1 (old exporters), 0 and unnamed dims are unknown, not sizes the range must repeat."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 0, None, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(graph)
    ranges = parse_shape_range({"x": [[1, 4], [2, 9], [5, 50, 5], 3]})
    assert check_against_model(m, ranges, None) == ranges
    with pytest.raises(MetaInferError, match="fixes that axis to 3"):
        check_against_model(m, parse_shape_range({"x": [1, 1, 1, [1, 3]]}), None)


def test_equal_ranges_on_a_shared_symbol_pass():
    ranges = parse_shape_range({"x": [[1, 4], [8, 128]], "mask": [[1, 4], [8, 128]]})
    assert check_against_model(_seq_model(), ranges, {}) == ranges


# --- tuned_shapes ----------------------------------------------------------------------------


def test_input_shapes_win_over_samples_and_middle():
    ranges = parse_shape_range({"x": [1, [8, 128]], "mask": [1, [8, 128]]})
    samples = [{"x": (1, 32), "mask": (1, 32)}] * 3
    assert tuned_shapes(ranges, {"x": [1, 16], "mask": [1, 16]}, samples) == {"x": [1, 16], "mask": [1, 16]}


def test_most_frequent_in_range_sample_shape_is_tuned():
    ranges = parse_shape_range({"x": [1, [8, 128]]})
    samples = [{"x": (1, 32)}, {"x": (1, 64)}, {"x": (1, 64)}, {"x": (1, 512)}, {"x": (1, 512)}, {"x": (1, 512)}]
    assert tuned_shapes(ranges, None, samples) == {"x": [1, 64]}   # 512 is the most frequent but outside


def test_middle_with_step_when_nothing_else_says():
    ranges = parse_shape_range({"x": [[1, 8], 3, [160, 1280, 32], [160, 1280, 32]]})
    assert tuned_shapes(ranges, None) == {"x": [4, 3, 704, 704]}
    # samples outside the range say nothing either
    assert tuned_shapes(ranges, {}, [{"x": (1, 3, 100, 100)}]) == {"x": [4, 3, 704, 704]}


def test_inputs_sharing_a_symbol_are_tuned_alike():
    ranges = parse_shape_range({"x": [1, [8, 128]], "mask": [1, [8, 128]]})
    tuned = tuned_shapes(ranges, None)
    assert tuned["x"] == tuned["mask"] == [1, 68]


# --- derived_ranges --------------------------------------------------------------------------


def test_derived_ranges_half_to_double_on_dynamic_axes():
    symbolic = {"x": ["N", "seq"], "image": [1, 3, "?", "?"], "static": [1, 4]}
    tuned = {"x": [1, 64], "image": [1, 3, 224, 225]}
    assert derived_ranges(symbolic, tuned) == {
        "x": [DimRange(1, 2), DimRange(32, 128)],
        "image": [DimRange(1, 1), DimRange(3, 3), DimRange(112, 448), DimRange(112, 450)],
    }


# --- points ----------------------------------------------------------------------------------


def test_points_without_samples():
    ranges = parse_shape_range({"x": [1, [8, 128]], "mask": [1, [8, 128]]})
    got = points(ranges, {"x": [1, 64], "mask": [1, 64]})
    assert [p.name for p in got] == ["opt", "min", "max"]
    assert [p.weight for p in got] == [0.5, 0.25, 0.25]
    assert got[1].shapes == {"x": [1, 8], "mask": [1, 8]} and got[2].shapes == {"x": [1, 128], "mask": [1, 128]}


def test_a_point_equal_to_an_earlier_one_is_merged_into_it():
    ranges = parse_shape_range({"x": [1, [8, 128]]})
    got = points(ranges, {"x": [1, 8]})          # tuned at min
    assert [(p.name, p.weight) for p in got] == [("opt", 0.75), ("max", 0.25)]


def test_points_with_samples_weighted_by_share_with_a_floor():
    ranges = parse_shape_range({"x": [1, [8, 128]]})
    samples = [{"x": (1, 64)}] * 6 + [{"x": (1, 32)}] * 2 + [{"x": (1, 128)}] * 2 + [{"x": (1, 999)}] * 5
    got = points(ranges, {"x": [1, 64]}, samples)
    assert [p.name for p in got] == ["opt", "min", "max", "data 1"]
    assert got[3].shapes == {"x": [1, 32]}
    weights = {p.name: p.weight for p in got}
    assert sum(weights.values()) == pytest.approx(1.0)
    # 10 samples in range (the 5 at 999 are outside): opt 6, max 2, data 2; min has none: the 25 % floor
    assert weights == pytest.approx({"opt": 0.75 * 0.6, "min": 0.25, "max": 0.75 * 0.2, "data 1": 0.75 * 0.2})


def test_points_when_every_point_has_samples_and_data_numbering():
    ranges = parse_shape_range({"x": [[1, 4], [8, 128]]})
    samples = [{"x": s} for s in [(2, 16), (1, 8), (4, 128), (2, 16), (3, 16), (2, 64)]]
    got = points(ranges, {"x": [2, 16]}, samples)
    assert [p.name for p in got] == ["opt", "min", "max", "data 1", "data 2"]
    assert [p.shapes["x"] for p in got[3:]] == [[3, 16], [2, 64]]
    assert [p.weight for p in got] == pytest.approx([2 / 6, 1 / 6, 1 / 6, 1 / 6, 1 / 6])


# --- outside ---------------------------------------------------------------------------------


def test_outside_names_input_axis_size_and_range():
    ranges = parse_shape_range({"x": [1, [8, 128]], "image": [1, 3, [160, 640, 32], 320]})
    assert outside(ranges, {"x": (1, 8), "image": (1, 3, 192, 320), "other": (5, 5, 5)}) is None
    assert outside(ranges, {"x": (1, 64)}) is None        # an input not fed is not this check's business
    msg = outside(ranges, {"x": (1, 256)})
    assert msg is not None and "\n" not in msg
    assert "Input 'x' has size 256 on axis 1" in msg and "[8, 128]" in msg
    assert "pad the input" in msg and "wider model.shape_range" in msg
    off_grid = outside(ranges, {"image": (1, 3, 170, 320)})
    assert off_grid is not None and "size 170 on axis 2" in off_grid and "[160, 640, step 32]" in off_grid
    assert "rank 3" in (outside(ranges, {"x": (1, 8, 1)}) or "")


# --- to_json, from_json, describe ------------------------------------------------------------


def test_json_round_trip_and_describe():
    ranges = parse_shape_range({"x": [[1, 8], 3, [160, 1280, 32]], "mask": [1, [8, 128]]})
    as_json = to_json(ranges)
    assert as_json == {"x": [[1, 8], 3, [160, 1280, 32]], "mask": [1, [8, 128]]}
    assert from_json(as_json) == ranges
    assert describe(parse_shape_range({"x": [1, [8, 128]], "mask": [1, [8, 128]]})) == "x [1, 8..128], mask [1, 8..128]"
    assert describe(ranges).startswith("x [1..8, 3, 160..1280 step 32]")


# --- through the Hydra composition -----------------------------------------------------------


def test_composed_range_is_validated(tmp_path):
    from app.compose import load_settings

    path = tmp_path / "m.onnx"
    onnx.save(_seq_model(), str(path))
    base = [f"paths.artifacts={tmp_path}", "model=file", f"model.path={path}"]
    settings, _ = load_settings([*base, "model.shape_range={x:[1,[8,128]],mask:[1,[8,128]]}"])
    assert settings.model.shape_range == {"x": [1, [8, 128]], "mask": [1, [8, 128]]}
    settings, _ = load_settings([*base, "model.shape_range={image:[[1,8],3,48,[160,1280,32]]}"])
    assert parse_shape_range(settings.model.shape_range)["image"][3] == DimRange(160, 1280, 32)
    with pytest.raises(MetaInferError) as exc:
        load_settings([*base, "model.shape_range={x:[1,[128,8]]}"])
    assert "model.shape_range.x axis 1: [128, 8] has min 128 above max 8" in str(exc.value)
    with pytest.raises(MetaInferError, match=r"model.input_shapes.x=\[1, 16, 1\] has rank 3, but model.shape_range.x "
                                             r"has rank 2"):
        load_settings([*base, "model.shape_range={x:[1,[8,128]]}", "model.input_shapes={x:[1,16,1]}"])
