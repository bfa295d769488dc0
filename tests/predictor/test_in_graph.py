"""In-graph kernel times on the measured `cpu` target: ONNX Runtime's profile of a whole plan
mapped back to the plan's kernels, stored with the plan's run, learned by a contextual kernel
model; and the latency statistic a measured target learns."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.ir.kernels import group_kernels
from metainfer_core.normalize import normalize
from metainfer_core.predictor import CostModel, PredictorStore, TargetSpec, kernel_params
from metainfer_core.predictor.dataset import in_graph
from metainfer_core.predictor.lifecycle.fine_tune import fine_tune
from metainfer_core.predictor.features.graph_context import in_context
from metainfer_core.predictor.model.labels import latency_ms
from metainfer_core.predictor.features.plan_graph import describe
from metainfer_core.ir.tensors import random_feeds, tensor_infos

from predictor.conftest import target


def _block() -> onnx.ModelProto:
    """x -> Conv -> Relu -> Conv -> Add(x) -> Relu -> MatMul: ONNX Runtime fuses the first Relu
    into its Conv, moves the convolutions to its blocked layout (`<tensor>_nchwc` names, reorder
    nodes around them) and runs the residual Add and Relu on their own."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.1).astype(np.float32), n)
             for n, s in (("W1", (16, 16, 3, 3)), ("W2", (16, 16, 3, 3)), ("M", (32, 8)))]
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "W2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "x"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["r2"], name="relu2"),
             helper.make_node("MatMul", ["r2", "M"], ["y"], name="matmul")]
    g = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 32, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return normalize(m).model


@pytest.fixture(scope="module")
def cpu():
    return target("cpu")[0]


def test_profile_maps_runtime_nodes_back_to_kernels(cpu):
    m = _block()
    feed = random_feeds(m)
    kernels = group_kernels(m, tensor_infos(m))
    events = cpu.profile_events(m.SerializeToString(), feed, 5)
    times = in_graph.node_times(events)
    assert times and all(t >= 0 for _, _, t in times)
    got = in_graph.attribute(m, kernels, times)
    us = dict(zip([k.node_names[0] for k in kernels], got["kernel_us"]))
    # nothing is lost: every runtime node's time lands on a kernel or in the unmapped rest
    assert sum(got["kernel_us"]) + got["unmapped_us"] == pytest.approx(sum(t for _, _, t in times))
    assert got["nodes"] == len(times)
    # the convolution carries its fused Relu's time; that Relu costs nothing of its own
    assert us["conv1"] > 0 and us["conv2"] > 0 and us["matmul"] > 0
    assert us["relu1"] == 0 and us["relu2"] > 0
    assert "r1_nchwc" in {n for n, _, _ in times}          # the fusion really happened in this runtime


def test_runtime_names_resolve_to_onnx_nodes():
    m = _block()
    nodes = {n.name: n for n in m.graph.node}
    producer = {o: n for n in m.graph.node for o in n.output}
    resolve = lambda name, op: in_graph._original(name, op, nodes, producer)  # noqa: E731
    assert resolve("conv1", "Conv") == "conv1"
    assert resolve("r1_nchwc", "Conv") == "conv1"           # Conv+Relu, named after the Relu's output
    assert resolve("r2_nchwc", "Conv") == "conv2"           # a Conv+Add+Relu would be found a few producers up
    assert resolve("r2_nchwc", "Relu") == "relu2"
    assert resolve("matmul/MatMulAddFusion", "Gemm") == "matmul"
    assert resolve("conv2_token_7", "QLinearConv") == "conv2"
    assert resolve("ReorderOutput", "ReorderOutput") is None


def test_interleaved_profiles_are_stored_and_learned(cpu):
    m = _block()
    feed = random_feeds(m)
    (profiled,) = in_graph.profile_plans(cpu, [m], [feed], runs=5)
    graph = describe(m)
    assert len(profiled["kernel_us"]) == len(graph["kernels"])
    graph[in_graph.KEY] = profiled
    run = {"model": "block", "label": "default", "graph": graph, "median_ms": 1.0, "p10_ms": 0.9}
    descs, ms = in_graph.training_rows([run, run])
    assert len(descs) == len(graph["kernels"])                 # one row per kernel and context
    assert all(d["context"] != "standalone" for d in descs) and (ms >= in_graph.FLOOR_US / 1e3).all()
    contexts = {d["features"]["op_type"]: d["context"] for d in in_context(graph["kernels"])}
    assert contexts["Conv"] == "anchor" and contexts["Relu"] == "epilogue"


def test_bytes_crossing_an_int8_regions_border_are_counted_where_they_cross(cpu):
    m = _block()
    feeds = [random_feeds(m, seed=i) for i in range(2)]
    action = ACTIONS["int8"]
    params = {"scope": "compute", "activation_type": "QUInt8", "weight_type": "QInt8", "per_channel": "auto",
              "calibrate_method": "MinMax"}
    q = action.apply(m, action.sites(m, params, cpu.info)[0], params, ActionContext(cpu.info, feeds))
    kernels = describe(q)["kernels"]
    descs = in_context(kernels)
    inside = [d["int8_region"] == 1.0 for d in descs]
    # both convolutions, the Relu between them (it reads and writes int8) and the MatMul; lone (de)quantize stay out
    assert [d["features"]["op_type"] for d, i in zip(descs, inside) if i] == ["Conv", "Relu", "Conv", "MatMul"]
    for i, (k, d) in enumerate(zip(kernels, descs)):
        crossing_in = sum(b for p, b in k["inputs"] if p >= 0 and inside[p] != inside[i])
        crossing_out = sum(b for j, other in enumerate(kernels) for p, b in other["inputs"]
                           if p == i and inside[j] != inside[i])
        assert d["log_region_in"] == pytest.approx(np.log10(1 + crossing_in))
        assert d["log_region_out"] == pytest.approx(np.log10(1 + crossing_out))
    convs = [d for d in descs if d["features"]["op_type"] == "Conv"]
    assert convs[0]["log_region_in"] > 0 and convs[0]["log_region_out"] == 0     # enters the region, stays in it
    assert convs[1]["log_region_in"] == 0 and convs[1]["log_region_out"] > 0     # leaves it for the float Add
    # the float plan has no integer region
    assert all(d["int8_region"] == 0 and d["log_region_in"] == 0 for d in in_context(describe(m)["kernels"]))


def test_a_contextual_model_predicts_plans_in_context_and_survives_a_reload(cpu, tmp_path, monkeypatch):
    """Trained on a real cpu library holding micro-benchmarks and one profiled plan."""
    from metainfer_core.fingerprint import FingerprintLibrary
    from metainfer_core.fingerprint.library import PlanRun
    from metainfer_core.fingerprint.profiler import profile
    from metainfer_core.backends.base import Timing

    m = _block()
    feed = random_feeds(m)
    lib = FingerprintLibrary(f"sqlite:///{tmp_path}/fp.db")
    profile(cpu, lib, [m], [1, 2, 4], reps=5, warmup=1)
    version = cpu.info.fingerprint_version
    graph = describe(m)
    graph[in_graph.KEY] = in_graph.profile_plans(cpu, [m], [feed], runs=5)[0]
    compiled = cpu.compile(m)
    samples = [compiled.time_once(feed) for _ in range(13)][3:]
    lib.add_plan_runs(cpu.info, [PlanRun("block", "k", "default", graph, Timing.from_samples(samples))])
    spec = target("cpu")[1]
    # a handful of rows: enough trees at a high rate to fit them (the default regularises them away)
    cm = CostModel.train(lib.training_records(version), version, spec=spec, plan_runs=lib.plan_runs(version),
                         params=kernel_params(500, 0.3, 4))
    assert cm.kernels.contextual
    # the plan's kernels are predicted as they cost inside it, near what its profile said once
    # made to add up to the timed run (six rows of a plan beside eighteen micro-benchmarks:
    # CatBoost fits them only roughly)
    in_plan = cm.predict_graph_kernels_ms(graph)
    profiled = in_graph.to_whole(graph[in_graph.KEY], 1e3 * float(np.percentile(samples, 10)), 0.0) / 1e3
    assert in_plan.sum() == pytest.approx(profiled.sum(), rel=0.5)
    anchors = [i for i, k in enumerate(graph["kernels"]) if k["features"]["op_type"] in ("Conv", "MatMul")]
    assert in_plan[anchors].sum() > 0.5 * in_plan.sum()          # the convolutions and the MatMul dominate
    rev = cm.save(tmp_path / "pred")
    again = CostModel.load(tmp_path / "pred", rev)
    assert again.kernels.contextual
    assert again.predict_graph_ms(graph) == pytest.approx(cm.predict_graph_ms(graph))
    # fine-tuning continues the contextual model on the plan's kernels in their context
    PredictorStore(tmp_path / "pred").set_current(rev)
    deployed = PlanRun("block", "k", "deployed", graph, Timing.from_samples(samples), source="runtime")
    lib.add_plan_runs(cpu.info, [deployed])
    runtime = lib.plan_runs(version, source="runtime")
    result = fine_tune(tmp_path / "pred", runtime, lib.plan_runs(version, source="zoo"), lib.training_records(version),
                       iterations=10)
    assert CostModel.load(tmp_path / "pred", result.revision).kernels.contextual
    # a revision saved before the int8-region columns existed still loads and predicts with its own columns
    from metainfer_core.predictor.model import kernel_model
    from metainfer_core.predictor.features import target_join
    with monkeypatch.context() as patched:
        patched.setattr(kernel_model, "CONTEXT_NUMERIC", target_join.CONTEXT_NUMERIC_V1)
        old = CostModel.train(lib.training_records(version), version, spec=spec, plan_runs=lib.plan_runs(version),
                              params=kernel_params(500, 0.3, 4))
    old_rev = old.save(tmp_path / "old")
    (PredictorStore(tmp_path / "old").path(old_rev) / "kernel_context.json").write_text('{"contextual": true}')
    reloaded = CostModel.load(tmp_path / "old", old_rev)
    assert reloaded.kernels.context_numeric == target_join.CONTEXT_NUMERIC_V1
    assert reloaded.predict_graph_ms(graph) == pytest.approx(old.predict_graph_ms(graph))


def test_measured_targets_learn_the_low_percentile():
    row = {"median_ms": 2.0, "p10_ms": 1.5}
    assert latency_ms(row, TargetSpec(name="cpu")) == 1.5
    assert latency_ms(row, TargetSpec(name="npu", peak_gflops={"int8": 1.0})) == 2.0
    assert latency_ms(row, None) == 2.0


def test_profiled_kernel_times_are_made_to_add_up_to_the_timed_run():
    # three kernels: two timed by the profiler with its per-node overhead in them, one fused
    # away (the floor); the run took 25 us, of which 5 are the session's own overhead
    profiled = {"kernel_us": [12.0, in_graph.FLOOR_US, 22.0], "unmapped_us": 2.0, "nodes": 3}
    us = in_graph.to_whole(profiled, whole_us=25.0, overhead_us=5.0)
    # the excess over the run (16.5 us) came off the two timed kernels equally, then the rest
    # was scaled so kernels plus unmapped time add up to the 20 us
    a, b = 12.0 - 16.5 / 2, 22.0 - 16.5 / 2
    scale = 20.0 / (a + in_graph.FLOOR_US + b + 2.0)
    assert us == pytest.approx([a * scale, in_graph.FLOOR_US * scale, b * scale])
    assert us.sum() + 2.0 * scale == pytest.approx(20.0)
    # a run the profile under-counts: nothing taken off, all scaled up
    up = in_graph.to_whole(profiled, whole_us=100.0, overhead_us=0.0)
    assert up == pytest.approx(np.array(profiled["kernel_us"]) * 100.0 / 36.5)


def test_the_run_overhead_is_the_intercept_of_whole_runs_against_their_profiles():
    rng = np.random.default_rng(0)
    runs = []
    for _ in range(12):
        us = rng.uniform(5, 50, size=int(rng.integers(3, 30)))
        nodes = len(us)
        whole = 9.0 + us.sum() - 2.0 * nodes        # 9 us per run, the profiler adds 2 us a node
        runs.append({"p10_ms": whole / 1e3, "median_ms": whole / 1e3,
                     "graph": {in_graph.KEY: {"kernel_us": list(us), "unmapped_us": 0.0, "nodes": nodes}}})
    assert in_graph.run_overhead_us(runs) == pytest.approx(9.0, rel=1e-3)
    assert in_graph.run_overhead_us(runs[:2]) == 0.0          # too few runs to tell
