"""Plan directives: one entry per key, plan-wide ones read back under the metainfer. prefix."""
from onnx import TensorProto, helper

from metainfer_core.ir.directives import (DOUBLE_BUFFER_KEY, FUSION_KEY, STRATEGY_KEY, double_buffered, model_meta,
                                       node_meta, plan_meta, set_model_meta, set_node_meta)


def _model():
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    return helper.make_model(graph)


def test_writing_a_directive_twice_keeps_one_entry_with_the_last_value():
    m = _model()
    node = m.graph.node[0]
    assert node_meta(node, FUSION_KEY) is None
    set_node_meta(node, FUSION_KEY, "fg0")
    set_node_meta(node, FUSION_KEY, "fg1")
    assert node_meta(node, FUSION_KEY) == "fg1" and len(node.metadata_props) == 1
    set_model_meta(m, STRATEGY_KEY, "none")
    set_model_meta(m, STRATEGY_KEY, "greedy")
    assert model_meta(m, STRATEGY_KEY) == "greedy" and len(m.metadata_props) == 1


def test_plan_meta_holds_only_metainfer_keys_and_double_buffering_needs_one():
    m = _model()
    m.metadata_props.add(key="producer.note", value="x")
    set_model_meta(m, DOUBLE_BUFFER_KEY, "0")
    assert plan_meta(m) == {DOUBLE_BUFFER_KEY: "0"} and not double_buffered(m)
    set_model_meta(m, DOUBLE_BUFFER_KEY, "1")
    assert double_buffered(m)
