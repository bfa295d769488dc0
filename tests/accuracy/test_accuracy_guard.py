"""Int8 that breaks the accuracy bound: the guard finds the sensitive nodes and pins them."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from metainfer_core.accuracy.metric import plan_loss, run_cpu
from metainfer_core.accuracy.guard import node_errors, repair
from metainfer_core.actions import ACTIONS, ActionContext, Step
from metainfer_core.ir.tensors import random_feeds

from graphs import model_of

INT8 = {"scope": "compute", "activation_type": "QUInt8", "weight_type": "QInt8", "per_channel": False,
        "calibrate_method": "MinMax"}


def outlier_mlp():
    """x -> MatMul(W1) -> Relu -> MatMul(W2) -> Relu -> MatMul(W3) -> y, where one output column
    of W2 is 1000x larger and W3 scales that channel back down: harmless in fp32, but per-tensor
    int8 scales on W2 and on the hidden activation wipe out every other channel."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((32, 64)).astype(np.float32) * 0.2
    w2 = rng.standard_normal((64, 64)).astype(np.float32) * 0.2
    w3 = rng.standard_normal((64, 10)).astype(np.float32) * 0.2
    w2[:, 0] *= 1000.0
    w3[0, :] /= 1000.0
    inits = [numpy_helper.from_array(w, n) for w, n in ((w1, "W1"), (w2, "W2"), (w3, "W3"))]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h1"], name="mm1"),
             helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
             helper.make_node("MatMul", ["r1", "W2"], ["h2"], name="mm2"),
             helper.make_node("Relu", ["h2"], ["r2"], name="relu2"),
             helper.make_node("MatMul", ["r2", "W3"], ["y"], name="mm3")]
    return model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 32])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 10])], inits)


def test_bisection_pins_the_sensitive_node_and_meets_the_bound():
    m = outlier_mlp()
    feeds = [random_feeds(m, seed=i) for i in range(4)]
    reference = run_cpu(m, feeds)
    ctx = ActionContext(calibration_feeds=feeds)
    site = ACTIONS["int8"].sites(m, INT8, None)[0]
    q = ACTIONS["int8"].apply(m, site, INT8, ctx)
    max_loss = 0.01
    assert plan_loss(reference, run_cpu(q, feeds)) > max_loss        # plain int8 breaks the bound

    errors = node_errors(m, q, feeds)
    assert max(errors, key=errors.get) == "mm2"                       # its int8 weights lose the small columns

    fixed = repair(m, (Step("int8", site, tuple(sorted(INT8.items()))),), q, ctx, feeds, reference, max_loss)
    # mm2 first; then error enters at mm3, whose int8 input has the 1000x channel's scale
    assert fixed.ok and fixed.culprits == ["mm2", "mm3"]
    assert fixed.loss_after <= max_loss < fixed.loss_before
    assert set(fixed.steps[0].site.nodes) == {"mm1"}                  # the harmless layer stays int8
    assert fixed.evaluations == 2
