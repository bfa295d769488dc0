"""OpenVINO compiles a graph with dynamic dims per input shape it meets and keeps the last
MAX_SHAPES compiles: a shape met again runs without compiling; a model already in OpenVINO's form
compiles as it is."""
from __future__ import annotations

import numpy as np

from metainfer_core.accuracy.metric import run_cpu
from metainfer_core.backends.ov_backend import MAX_SHAPES, OpenVinoBackend, read_onnx
from metainfer_core.zoo import build

SPEC = {"memory_limit_bytes": 0, "intra_op_threads": 1, "inference_precision": "f32"}


def test_a_dynamic_graph_is_compiled_once_per_shape_and_kept():
    model = build("mlp", seed=0)                # input [batch, 256]
    backend = OpenVinoBackend("cpu", "measured", SPEC)
    c = backend.compile(model)
    feeds = {b: {"input": np.random.default_rng(b).standard_normal((b, 256)).astype(np.float32)} for b in (1, 3)}
    for b in (1, 3):
        np.testing.assert_allclose(c.run(feeds[b])[0], run_cpu(model, [feeds[b]])[0][0], rtol=1e-4, atol=1e-5)
    spent = c.compile_s
    for b in (1, 3, 1):                          # both shapes kept: no compile on the way back
        assert c.run(feeds[b])[0].shape == (b, 10)
    assert c.compile_s == spent and len(c._kept) == 2 <= MAX_SHAPES
    for b in range(4, 4 + MAX_SHAPES):           # the least recently run drop out
        c.time_once({"input": np.zeros((b, 256), np.float32)})
    assert len(c._kept) == MAX_SHAPES


def test_a_model_in_openvinos_form_compiles_as_it_is():
    model = build("mlp", seed=0)
    backend = OpenVinoBackend("cpu", "measured", SPEC)
    ov_model = read_onnx(model.SerializeToString(), {"input": [2, 256]})
    x = np.ones((2, 256), np.float32)
    np.testing.assert_allclose(backend.compile_ov(ov_model).run({"input": x})[0], run_cpu(model, [{"input": x}])[0][0],
                               rtol=1e-4, atol=1e-5)
