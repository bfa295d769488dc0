"""The search binds each model to the execution path that measures faster on this CPU: a
convolutional U-Net to OpenVINO (its bf16 datapath where the CPU has one), a GRU to ONNX Runtime; plan.json and MLflow
record the path and its settings, and load_plan serves both plans within the accuracy bound."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from mlflow.tracking import MlflowClient
from onnx import TensorProto, helper, numpy_helper

from metainfer_core.accuracy.metric import plan_loss, run_cpu
from metainfer_core.actions import ACTIONS
from metainfer_core.backends import create_backend
from metainfer_core.backends.ov_backend import device_precisions
from metainfer_core.plan.deployable import load_plan
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.backends.timing import interleaved
from metainfer_core.zoo import build

from twins import HOST_SPEC as SPEC


def gru(seq: int = 32, features: int = 40, hidden: int = 64) -> onnx.ModelProto:
    rng = np.random.default_rng(0)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    inits = [w("W", 1, 3 * hidden, features), w("R", 1, 3 * hidden, hidden), w("B", 1, 6 * hidden),
             w("Wo", hidden, 10), numpy_helper.from_array(np.array([0], np.int64), "axis0")]
    nodes = [helper.make_node("GRU", ["x", "W", "R", "B"], ["y", "h"], hidden_size=hidden, name="gru"),
             helper.make_node("Squeeze", ["h", "axis0"], ["last"], name="last"),
             helper.make_node("MatMul", ["last", "Wo"], ["logits"], name="head")]
    graph = helper.make_graph(nodes, "gru", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, 1, features])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def faster_runtime(model: onnx.ModelProto) -> tuple[str, float]:
    """Which runtime runs the unchanged graph faster here (ONNX Runtime vs OpenVINO in bf16 where
    this CPU has the datapath, else f32), and by how much."""
    host = create_backend("metainfer_core.backends.host.HostBackend", "cpu", "measured", SPEC)
    precision = "bf16" if "bf16" in device_precisions() else "f32"
    bound = ACTIONS["binding"].apply(model, None, {"runtime": "openvino", "precision": precision}, None)
    feeds = random_feeds(model, seed=0)
    ort_ms, ov_ms = (float(np.median(x)) for x in interleaved([host.compile(model), host.compile(bound)],
                                                               [feeds, feeds], 15, 2))
    return ("openvino", ort_ms / ov_ms) if ov_ms < ort_ms else ("onnxruntime", ov_ms / ort_ms)


@pytest.mark.slow
@pytest.mark.alone         # the test's own timing and the flow's must see the same quiet CPU
def test_search_binds_each_model_to_its_faster_path(run_flow, migrated, tmp_path):
    migrated(tmp_path)
    unet = tmp_path / "unet.onnx"
    onnx.save(build("unet_tiny", seed=0), unet)
    rnn = tmp_path / "gru.onnx"
    onnx.save(gru(), rnn)
    plans, margins = {}, {}
    for path, shapes in ((unet, "{input:[1,3,64,64]}"), (rnn, None)):
        expected, margin = faster_runtime(onnx.load(path))
        margins[path.name] = (expected, round(margin, 2))
        # the default weights: the runtimes' tens of MiB on this host do not outweigh the faster path
        args = ["model=file", f"model.path={path}", "search=quick", f"paths.artifacts={tmp_path}"]
        res = run_flow("adapt", *args, *([f"model.input_shapes={shapes}"] if shapes else []))
        assert res.returncode == 0, res.stderr
        plan = res.plan
        assert plan["search"]["anchor"]["measured_default_ms"] > 0      # timed on the host before the search
        if path == unet:    # OpenVINO's int8 form (slow on ONNX Runtime) was scored on the OpenVINO path at once
            assert any("|int8-inputs" in k and k.startswith("openvino") for k in plan["search"]["execution_paths"])
        # which path wins depends on the CPU (the U-Net takes OpenVINO where it has a bf16 datapath,
        # and ties in f32): the choice is checked where the paths are far enough apart
        if margin <= 1.3:
            continue
        assert plan["execution_path"]["runtime"] == expected, (path.name, plan["reason"], plan["candidates"])
        plans[expected] = res.plan_path.parent
        run = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db").get_run(plan["mlflow_run_id"])
        assert run.data.tags["execution_path"] == plan["execution_path"]["label"]
        assert plan["execution_path"]["settings"]["intra_op_threads"] == 1
    assert plans, f"no model here runs 1.3x faster on one path than on the other: {margins}"
    for runtime, folder in plans.items():           # the deployable plan, on its own path
        deployed = load_plan(folder)
        assert deployed.path["runtime"] == runtime
        default = onnx.load(str(folder / "default.onnx"))
        feeds = [random_feeds(default, seed=10 + i) for i in range(2)]
        reference = run_cpu(default, feeds)
        assert plan_loss(reference, [deployed(f) for f in feeds]) <= 0.01
