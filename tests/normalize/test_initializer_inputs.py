import numpy as np
from onnx import helper

from metainfer_core.normalize.passes import initializer_inputs

from .graphs import assert_rewrite, const, model, value


def test_weights_listed_as_inputs_become_constants():
    before = model(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        [value("x", [2]), value("w", [2])],
        [value("y", [2])],
        [const("w", np.ones(2, np.float32))],
    )
    after, changes = initializer_inputs.run(before)
    assert changes == 1
    assert_rewrite(before, after, ["Add"])
    assert [i.name for i in after.graph.input] == ["x"]
