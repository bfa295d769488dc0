"""bench/shape_ranges.py: the declared range built from a model's symbolic dims (synthetic graphs),
its Hydra override, the report's rows, and (slow) one real adapt over a range checked across it."""
from __future__ import annotations

import onnx
import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from onnx import TensorProto, helper

from bench import shape_ranges
from metainfer_core.normalize.shape_range import DimRange, parse_shape_range
from metainfer_core.normalize.shapes import symbolic_inputs
from metainfer_core.zoo import build


def _model(inputs: dict[str, list], dtype=TensorProto.FLOAT) -> onnx.ModelProto:
    """One Identity per input: only the signature matters here."""
    vis = [helper.make_tensor_value_info(n, dtype, dims) for n, dims in inputs.items()]
    outs = [helper.make_tensor_value_info(f"{n}_out", dtype, None) for n in inputs]
    nodes = [helper.make_node("Identity", [n], [f"{n}_out"]) for n in inputs]
    return helper.make_model(helper.make_graph(nodes, "g", vis, outs), opset_imports=[helper.make_opsetid("", 17)])


def _built(inputs: dict[str, list], shapes: dict[str, list[int]], step_of=lambda n, a: 1):
    return shape_ranges.build_range(symbolic_inputs(_model(inputs)), shapes, step_of)


def test_an_image_model_gets_a_batch_range_and_4x_spans_around_its_size():
    r = _built({"x": ["N", 3, "H", "W"]}, {"x": [1, 3, 32, 64]})
    assert r == {"x": [DimRange(1, 8), DimRange(3, 3), DimRange(16, 64), DimRange(32, 128)]}
    # a detector's image dims on a step of 32 through the corpus size
    r = _built({"x": ["N", 3, "H", "W"]}, {"x": [1, 3, 320, 416]}, lambda n, a: 32 if a in (2, 3) else 1)
    assert r["x"][2:] == [DimRange(160, 640, 32), DimRange(224, 832, 32)]
    assert all(d.contains(t) for d, t in zip(r["x"], [1, 3, 320, 416]))
    assert all(d.high >= 4 * d.low for d in r["x"] if not d.fixed and d.step == 1) and r["x"][2].high == 4 * r["x"][2].low


def test_inputs_sharing_a_symbol_get_one_range_and_scalars_are_left_out():
    r = _built({"ids": ["batch", "seq"], "mask": ["batch", "seq"]}, {"ids": [1, 64], "mask": [1, 64]})
    assert r["ids"] == r["mask"] == [DimRange(1, 8), DimRange(32, 128)]
    # silero_vad-like: the state carries the batch symbol on axis 1; the scalar rate is not declared
    model = _model({"input": ["batch", "sequence"], "state": [2, "batch", 128]})
    model.graph.input.append(helper.make_tensor_value_info("sr", TensorProto.INT64, []))
    r = shape_ranges.build_range(symbolic_inputs(model), {"input": [1, 512], "state": [2, 1, 128], "sr": []})
    assert r == {"input": [DimRange(1, 8), DimRange(256, 1024)], "state": [DimRange(2, 2), DimRange(1, 8),
                                                                           DimRange(128, 128)]}


def test_exporter_named_dims_of_twin_inputs_vary_together():
    inputs = {"input_1": ["unk__1", 21], "input_2": ["unk__2", 21]}       # deepcut: not a batch, 96 characters
    r = _built(inputs, {"input_1": [96, 21], "input_2": [96, 21]})
    assert r["input_1"] == r["input_2"] == [DimRange(48, 192), DimRange(21, 21)]
    groups = shape_ranges.dim_groups(symbolic_inputs(_model(inputs)), r)
    assert groups == [[("input_1", 0), ("input_2", 0)]]
    points = shape_ranges.check_points(r, groups, seed=3)
    assert [n for n, _ in points] == ["min", "max"] + [f"random {i}" for i in range(1, 6)]
    assert all(s["input_1"] == s["input_2"] and 48 <= s["input_1"][0] <= 192 for _, s in points)
    assert points == shape_ranges.check_points(r, groups, seed=3)      # seeded


def test_the_override_reads_back_as_the_range():
    r = {"serving_default_input_2:0": [DimRange(1, 8), DimRange(43844, 43844), DimRange(1, 1)],
         "x": [DimRange(1, 8), DimRange(160, 640, 32)]}
    text = shape_ranges.range_override(r)
    override = OverridesParser.create().parse_override(text)
    assert override.key_or_group == "model.shape_range"
    assert parse_shape_range(override.value()) == r


def test_a_failed_adapt_is_a_row_of_the_table():
    rows = [{"name": "m", "rc": 2, "error": "error: bad range", "adapt_s": 3.0, "total_s": 4.0,
             "range": {"x": [[1, 8], 3]}}, {"name": "s", "skipped": "no symbolic input dim"}]
    lines = shape_ranges.table(rows, with_peers=True)
    assert "| m | x [1..8, 3] | failed (2) |" in lines[2] and lines[3].startswith("| s | no symbolic")
    assert len({ln.count("|") for ln in lines}) == 1
    assert "error: bad range" in "\n".join(shape_ranges.findings(rows))


@pytest.mark.slow
def test_a_plan_adapted_over_a_range_runs_across_it_and_refuses_outside(run_flow, migrated, tmp_path):
    migrated(tmp_path)
    res = run_flow("adapt", "target=cpu", "model=mlp", "search=quick", "budget.total_s=40",
                   "model.shape_range={input:[[1,8],256]}", f"paths.artifacts={tmp_path}", timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    ranges = parse_shape_range({"input": [[1, 8], 256]})
    check = shape_ranges.check_run(res.plan_path.parent, build("mlp"), ranges)
    assert check["symbols_kept"] and not check["fixed_dims"]
    assert (check["n_ok"], check["n_points"]) == (7, 7), check["points"]
    assert check["worst_loss"] <= check["bound"]
    assert check["refused_outside"] is True and "outside the plan's shape range" in check["refused"]
    assert {p["name"] for p in check["plan_points"]} >= {"opt", "max"}
