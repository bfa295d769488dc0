"""Requests combined into one call (serving/batching.py): offered only where every input's first
dim may vary within the range, served with each request's own rows, refused for a model that
mixes rows, and kept by load_plan."""
from __future__ import annotations

import json
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from metainfer_core.backends.runtimes import runtime_of
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.normalize.shape_range import DimRange
from metainfer_core.serving.batching import BatchingPool, NotBatchable, batch_rows, check_rows
from metainfer_core.serving.options import describe, split_setting
from metainfer_core.zoo import build

from twins import backend

from tests.serving.clients import assert_same_answers, served_by_clients


def _mixing(rows_apart: bool) -> onnx.ModelProto:
    """x [n, 4] -> x @ w, minus the batch mean of x @ w where `rows_apart` is False (mixes rows)."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"])]
    if rows_apart:
        nodes.append(helper.make_node("Relu", ["h"], ["y"]))
    else:
        nodes += [helper.make_node("ReduceMean", ["h"], ["m"], axes=[0], keepdims=1),
                  helper.make_node("Sub", ["h", "m"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_the_rows_a_call_may_take_come_from_the_range_of_every_inputs_first_dim():
    model = build("mlp", seed=0)        # input [batch, 256]
    assert batch_rows(model, {"input": [DimRange(1, 2), DimRange(256, 256)]}, {"input": [1, 256]}) == 2
    assert batch_rows(model, {"input": [DimRange(1, 8), DimRange(256, 256)]}, {"input": [1, 256]}) == 8
    assert batch_rows(model, {"input": [DimRange(1, 1), DimRange(256, 256)]}, {"input": [1, 256]}) == 1   # fixed
    assert batch_rows(model, {}, {}) == 1       # the range does not let it vary
    # a request of several rows (a sentence's windows): not a batch of requests
    assert batch_rows(model, {"input": [DimRange(20, 80), DimRange(256, 256)]}, {"input": [40, 256]}) == 1
    static = build("mlp", seed=0)
    static.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    assert batch_rows(static, {"input": [DimRange(1, 2), DimRange(256, 256)]}, {"input": [1, 256]}) == 1


def test_batched_settings_are_offered_where_sessions_get_several_requests_and_grow_with_the_cores():
    ort = runtime_of("onnxruntime").serving_options(16, 8, rows=8)
    assert [(o["sessions"], o["intra_op_threads"], o.get("batch")) for o in ort] == [
        (1, 16, None), (2, 8, None), (4, 4, None), (8, 2, None), (1, 16, 8), (2, 8, 4), (4, 4, 2)]
    # OpenVINO compiles each input shape apart: its requests are not combined
    assert all("batch" not in o for o in runtime_of("openvino").serving_options(16, 8, rows=4))
    # two requests on two cores: only the one session taking both can combine them
    assert [o.get("batch") for o in runtime_of("onnxruntime").serving_options(2, 2, rows=2)] == [None, None, 2]
    assert all("batch" not in o for o in runtime_of("onnxruntime").serving_options(16, 8))      # rows=1
    assert describe({"sessions": 2, "intra_op_threads": 8, "batch": 4}) == \
        "2 sessions, 8 threads each, batches of up to 4"
    assert split_setting({"sessions": 2, "intra_op_threads": 8, "batch": 4}) == (2, {"intra_op_threads": 8})


@pytest.mark.parametrize("runtime,setting,calls", [
    ("onnxruntime", {"sessions": 1, "intra_op_threads": 2, "batch": 2}, 2),
    ("onnxruntime", {"sessions": 2, "intra_op_threads": 1, "batch": 2}, 2),
    ("onnxruntime", {"sessions": 1, "intra_op_threads": 2, "batch": 4}, 1),
])
def test_combined_requests_each_get_their_own_rows(runtime, setting, calls):
    pool, got, want = served_by_clients(runtime, setting, in_flight=4, requests=16)
    assert isinstance(pool, BatchingPool) and pool.size == calls      # 4 requests in flight, `batch` per call
    assert_same_answers(got, want, rtol=1e-4, atol=1e-5)


def test_requests_waiting_together_are_combined_into_one_call():
    model = _mixing(rows_apart=True)
    compiled = backend("cpu").compile(model)
    calls: list[int] = []
    gate = threading.Event()

    def slot(feeds):
        gate.wait()
        calls.append(feeds["x"].shape[0])
        return compiled.run(feeds)

    pool = BatchingPool([slot], rows=3, setting={"batch": 3})
    xs = [np.full((1, 4), i, np.float32) for i in range(4)]
    outs: dict[int, list] = {}
    threads = [threading.Thread(target=lambda i=i: outs.__setitem__(i, pool.run({"x": xs[i]}))) for i in range(4)]
    for t in threads:
        t.start()
    import time
    time.sleep(0.2)            # all four wait: the first call takes one, the next the other three
    gate.set()
    for t in threads:
        t.join()
    assert sorted(calls) == [1, 3]
    for i in range(4):
        np.testing.assert_allclose(outs[i][0], compiled.run({"x": xs[i]})[0], rtol=1e-6)
    # a request of another row shape is not stacked with these: it runs on its own
    wide = pool.run({"x": np.ones((2, 4), np.float32)})
    assert wide[0].shape == (2, 3) and calls[-1] == 2


def test_a_model_mixing_rows_across_its_first_dim_is_refused_a_batched_setting():
    feeds = {"x": np.random.default_rng(0).normal(size=(1, 4)).astype(np.float32)}
    check_rows(backend("cpu").compile(_mixing(rows_apart=True)).run, feeds, 2)
    with pytest.raises(NotBatchable, match="mixes rows"):
        check_rows(backend("cpu").compile(_mixing(rows_apart=False)).run, feeds, 2)


def test_load_plan_serves_the_recorded_batched_setting(tmp_path):
    from metainfer_core.plan.deployable import load_plan
    from plan_content import plan_content

    model = build("mlp", seed=0)
    onnx.save(model, str(tmp_path / "model.onnx"))
    path = {"runtime": "onnxruntime", "precision": "f32", "settings": {"providers": ["CPUExecutionProvider"],
                                                                         "intra_op_threads": 1}}
    setting = {"sessions": 1, "intra_op_threads": 2, "batch": 2}
    serving = {"mode": "throughput", "cores": 2, "concurrency": 2, "setting": setting}
    (tmp_path / "plan.json").write_text(json.dumps(plan_content(execution_path=path, serving=serving)))
    feeds = [random_feeds(model, seed=i) for i in range(4)]
    want = [backend("cpu").compile(model).run(f) for f in feeds]
    for threads in (None, 2):
        plan = load_plan(tmp_path, threads=threads)
        outs: dict[int, list] = {}
        ts = [threading.Thread(target=lambda i=i: outs.__setitem__(i, plan(feeds[i]))) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert all(np.allclose(outs[i][0], want[i][0], rtol=1e-4, atol=1e-5) for i in range(4))
        assert isinstance(plan.pool(feeds[0]), BatchingPool) and plan.pool(feeds[0]).rows == 2
