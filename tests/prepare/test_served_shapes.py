"""prepare on a dynamic target keeps the dims a shape range varies symbolic (tuned sizes in the
model's metadata, what every analysis reads), binds the ones it fixes, shares one range per
symbol, and prepares random inputs with reference outputs at the range's other points."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from metainfer_core.accuracy.metric import run_cpu
from metainfer_core.errors import MetaInferError
from metainfer_core.ir.tensors import input_feeds_spec, tensor_infos, tuned_shapes
from metainfer_core.prepare.stage import prepare_stage

from graphs import tagger


def _dims(model, name):
    vi = next(i for i in model.graph.input if i.name == name)
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


def test_a_declared_range_keeps_the_varying_dim_symbolic_and_binds_the_fixed_one(settings_for, tmp_path):
    path = tagger(tmp_path / "tagger.onnx")
    s = settings_for("model=file", f"model.path={path}", "target=cpu",
                     "model.shape_range={ids:[1,[8,32]],mask:[1,[8,32]]}", "model.input_shapes={ids:[1,16]}")
    said: list[str] = []
    p = prepare_stage(s, False, progress=said.append)
    assert _dims(p.model, "ids")[0] == 1 and isinstance(_dims(p.model, "ids")[1], str)   # batch bound, seq kept
    assert tuned_shapes(p.model) == {"ids": [1, 16], "mask": [1, 16]}     # the shared symbol: one size for both
    assert {k: v.shape for k, v in input_feeds_spec(p.model).items()} == {"ids": (1, 16), "mask": (1, 16)}
    assert tensor_infos(p.model)["pooled"].shape == (1, 8) and tensor_infos(p.model)["p"].shape == (16, 8)
    assert p.feeds[0]["ids"].shape == (1, 16)
    # the range's other points: random inputs there, and the original's outputs on them
    assert [pt.name for pt, _ in p.point_sets] == ["min", "max"]
    for point, samples in p.point_sets:
        assert samples.feeds[0]["ids"].shape == tuple(point.shapes["ids"]) == samples.feeds[0]["mask"].shape
        np.testing.assert_allclose(samples.reference[0][0], run_cpu(onnx.load(path), samples.feeds[:1])[0][0],
                                   rtol=1e-5, atol=1e-6)
    assert abs(sum(pt.weight for pt in p.served.points) - 1) < 1e-9
    assert any("keeping ids [1, 8..32]" in m for m in said), said
    # the graph still runs at other lengths: nothing was folded at the tuned one
    out = run_cpu(p.model, [{"ids": np.zeros((1, 29), np.int64), "mask": np.ones((1, 29), np.int64)}])
    assert out[0][0].shape == (1, 3)


def test_without_a_range_every_symbolic_dim_stays_and_half_and_double_are_checked(settings_for, tmp_path):
    path = tagger(tmp_path / "tagger.onnx")
    s = settings_for("model=file", f"model.path={path}", "target=cpu", "model.input_shapes={ids:[2,12],mask:[2,12]}")
    p = prepare_stage(s, False, progress=lambda m: None)
    assert all(isinstance(d, str) for d in _dims(p.model, "ids"))
    assert not p.served.declared
    assert {pt.name: pt.shapes["ids"] for pt in p.served.points} == {"opt": [2, 12], "min": [1, 6], "max": [4, 24]}


def test_a_derived_point_the_model_cannot_run_at_is_dropped_with_a_warning(settings_for, tmp_path):
    path = tagger(tmp_path / "tagger.onnx", table_rows=20)       # double the tuned 12 is past the table
    s = settings_for("model=file", f"model.path={path}", "target=cpu", "model.input_shapes={ids:[1,12],mask:[1,12]}")
    said: list[str] = []
    p = prepare_stage(s, False, progress=said.append)
    assert [pt.name for pt in p.served.points] == ["opt", "min"]
    assert p.served.dropped and "not verified there" in p.served.dropped[0] and "[2, 24]" in p.served.dropped[0]
    assert abs(sum(pt.weight for pt in p.served.points) - 1) < 1e-9
    assert any(m.startswith("WARNING: shapes:") for m in said)


def _pooling(path):
    """x [1, 1, h, 8] -> AveragePool over 4 rows, no padding: ONNX Runtime gives an
    empty output where h is under the window, OpenVINO refuses to compile there."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "h", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, "h_out", 8])
    pool = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[4, 1])
    onnx.save(helper.make_model(helper.make_graph([pool], "pool", [x], [y]), opset_imports=[helper.make_opsetid("", 13)]),
              str(path))
    return path


def test_a_derived_point_another_execution_path_cannot_run_at_is_dropped_naming_the_path(settings_for, tmp_path):
    from twins import backend

    host = backend("cpu")
    if not any(p.runtime == "openvino" for p in host.paths):
        pytest.skip("this host offers no OpenVINO path")
    path = _pooling(tmp_path / "pool.onnx")
    s = settings_for("model=file", f"model.path={path}", "target=cpu", "model.input_shapes={x:[1,1,6,8]}")
    said: list[str] = []
    p = prepare_stage(s, False, progress=said.append, path_failure=host.path_failure)
    assert [pt.name for pt in p.served.points] == ["opt", "max"]          # min: h 3, under the window of 4
    assert "openvino:f32 cannot run the model at x [1, 1, 3, 8]" in p.served.dropped[0], p.served.dropped
    assert any(m.startswith("WARNING: shapes: execution path openvino:") for m in said)
    # without the check (a target with no other path) ONNX Runtime runs it there, and min stays
    assert [pt.name for pt in prepare_stage(s, False, progress=lambda m: None).served.points] == ["opt", "min", "max"]
    # a path that cannot run the model at the tuned shape either is not failing at the point
    small = {"x": np.ones((1, 1, 3, 8), np.float32)}
    assert host.path_failure(onnx.load(str(path)), small, {"x": np.ones((1, 1, 6, 8), np.float32)})[0] == "openvino:f32"
    assert host.path_failure(onnx.load(str(path)), small, small) is None
    # a declared range is the user's: never narrowed for a path
    declared = settings_for("model=file", f"model.path={path}", "target=cpu", "model.shape_range={x:[1,1,[3,12],8]}",
                            "model.input_shapes={x:[1,1,6,8]}")
    assert "min" in [pt.name for pt in prepare_stage(declared, False, progress=lambda m: None,
                                                      path_failure=host.path_failure).served.points]


def test_a_declared_range_the_model_cannot_run_at_is_refused(settings_for, tmp_path):
    path = tagger(tmp_path / "tagger.onnx", table_rows=20)
    s = settings_for("model=file", f"model.path={path}", "target=cpu", "model.shape_range={ids:[1,[8,24]],mask:[1,[8,24]]}")
    with pytest.raises(MetaInferError, match=r"cannot run at: at max \(ids \[1, 24\].*Narrow model.shape_range"):
        prepare_stage(s, False, progress=lambda m: None)


def test_buckets_pad_only_along_an_axis_where_padding_changes_nothing_else(tmp_path):
    """The batch axis is paddable (rows are independent; the output's batch axis follows it);
    the sequence axis is not: the masked mean divides by the padded length."""
    from metainfer_core.normalize.shape_range import parse_shape_range
    from metainfer_core.prepare.buckets import bucket_layout, choose_buckets

    model = onnx.load(tagger(tmp_path / "tagger.onnx"))
    layout = bucket_layout(model, {"ids": [[1, 8], [8, 32]], "mask": [[1, 8], [8, 32]]}, {"ids": [2, 16], "mask": [2, 16]})
    assert layout.axes == {"ids": [0], "mask": [0]}
    assert layout.follows == {"ids": {"0": {"y": 0}}, "mask": {"0": {"y": 0}}}
    assert [b["ids"] for b in layout.buckets] == [[1, 8], [2, 16], [8, 32]]
    # a range that fixes a dim yields buckets that agree on it; duplicates merge
    ranges = parse_shape_range({"ids": [1, [8, 32]]})
    assert choose_buckets(ranges, {"ids": [1, 8]}) == [{"ids": [1, 8]}, {"ids": [1, 32]}]


def _grouped(path, groups):
    rng = np.random.default_rng(2)
    arrays = {}
    for name, (n, seq) in groups.items():
        arrays[f"ids/{name}"] = rng.integers(0, 16, (n, 1, seq))
        arrays[f"mask/{name}"] = np.ones((n, 1, seq), np.int64)
    np.savez(path, **arrays)
    return path


def test_samples_of_several_shapes_come_in_groups_and_weigh_the_points(settings_for, tmp_path):
    path = tagger(tmp_path / "tagger.onnx")
    npz = _grouped(tmp_path / "in.npz", {"short": (4, 8), "mid": (8, 16), "long": (2, 24)})
    s = settings_for("model=file", f"model.path={path}", f"data.inputs={npz}",
                     "model.shape_range={ids:[1,[8,32]],mask:[1,[8,32]]}")
    p = prepare_stage(s, False, progress=lambda m: None)
    assert tuned_shapes(p.model) == {"ids": [1, 16], "mask": [1, 16]}          # the most frequent shape
    assert p.served.sample_group == "mid" and len(p.feeds) + len(p.held_out.feeds) == 8
    weights = {pt.name: (pt.shapes["ids"][1], pt.weight) for pt in p.served.points}
    assert weights["opt"][0] == 16 and weights["min"][0] == 8 and weights["max"][0] == 32 and weights["data 1"][0] == 24
    assert weights["opt"][1] > weights["min"][1] > weights["data 1"][1] and abs(sum(w for _, w in weights.values()) - 1) < 1e-9
    sets = {pt.name: ss for pt, ss in p.point_sets}
    real = np.load(npz)
    np.testing.assert_array_equal(sets["min"].feeds[3]["ids"], real["ids/short"][3])     # the group's own samples
    assert len(sets["data 1"].feeds) == 2 and len(sets["max"].feeds) == 2              # random at max: no sample there


def test_malformed_groups_are_refused(settings_for, tmp_path):
    path = tagger(tmp_path / "tagger.onnx")
    npz = tmp_path / "bad.npz"
    np.savez(npz, **{"ids/a": np.zeros((2, 1, 8), np.int64), "mask/a": np.ones((2, 1, 8), np.int64),
                     "ids/b": np.zeros((3, 1, 16), np.int64)})
    s = settings_for("model=file", f"model.path={path}", f"data.inputs={npz}")
    with pytest.raises(MetaInferError, match=r"groups do not hold the same arrays"):
        prepare_stage(s, False, progress=lambda m: None)


def test_without_samples_of_a_points_shape_the_real_ones_are_cropped_or_tiled_to_it(settings_for, tmp_path):
    from metainfer_core.normalize.inputs import fit_to_shape

    a = np.arange(6).reshape(1, 6)
    np.testing.assert_array_equal(fit_to_shape(a, [1, 4]), [[0, 1, 2, 3]])
    np.testing.assert_array_equal(fit_to_shape(a, [2, 8]), [[0, 1, 2, 3, 4, 5, 0, 1]] * 2)
    path = tagger(tmp_path / "tagger.onnx")
    npz = _grouped(tmp_path / "in.npz", {"mid": (6, 16)})
    s = settings_for("model=file", f"model.path={path}", f"data.inputs={npz}",
                     "model.shape_range={ids:[1,[8,32]],mask:[1,[8,32]]}")
    p = prepare_stage(s, False, progress=lambda m: None)
    sets = {pt.name: ss for pt, ss in p.point_sets}
    judged = p.held_out.feeds[0]["ids"]
    np.testing.assert_array_equal(sets["min"].feeds[0]["ids"], judged[:, :8])          # real ids, cropped
    np.testing.assert_array_equal(sets["max"].feeds[0]["ids"][:, 16:], judged)          # and tiled
