from onnx import TensorProto, helper

from metainfer_core.normalize.passes import cse

from .graphs import assert_rewrite, if_node, model, op_types, value


def test_duplicates_merge_and_their_readers_then_merge_too():
    before = model(
        [
            helper.make_node("Relu", ["x"], ["r1"]),
            helper.make_node("Relu", ["x"], ["r2"]),
            helper.make_node("LeakyRelu", ["r1"], ["l1"], alpha=0.2),
            helper.make_node("LeakyRelu", ["r2"], ["l2"], alpha=0.2),
            helper.make_node("LeakyRelu", ["r2"], ["l3"], alpha=0.3),
            helper.make_node("Sum", ["l1", "l2", "l3"], ["y"]),
        ],
        [value("x", [2, 3])],
        [value("y", [2, 3])],
    )
    after, changes = cse.run(before)
    assert changes == 2
    assert_rewrite(before, after, ["Relu", "LeakyRelu", "LeakyRelu", "Sum"])


def test_two_graph_outputs_stay_apart():
    before = model(
        [helper.make_node("Relu", ["x"], ["y1"]), helper.make_node("Relu", ["x"], ["y2"])],
        [value("x", [2])],
        [value("y1", [2]), value("y2", [2])],
    )
    after, changes = cse.run(before)
    assert changes == 0
    assert op_types(after) == ["Relu", "Relu"]


def test_random_ops_and_subgraph_ops_never_merge():
    nodes = [
        helper.make_node("RandomUniformLike", ["x"], ["u1"]),
        helper.make_node("RandomUniformLike", ["x"], ["u2"]),
        if_node("c", ("x", "x"), "i1", [2]),
        if_node("c", ("x", "x"), "i2", [2]),
        helper.make_node("Sum", ["u1", "u2", "i1", "i2"], ["y"]),
    ]
    before = model(nodes, [value("x", [2]), value("c", [], TensorProto.BOOL)], [value("y", [2])])
    after, changes = cse.run(before)
    assert changes == 0
    assert op_types(after) == op_types(before)


def test_body_reading_the_duplicate_reads_the_kept_node():
    nodes = [
        helper.make_node("Relu", ["x"], ["r1"]),
        helper.make_node("Relu", ["x"], ["r2"]),
        if_node("c", ("r2", "r1"), "y", [2]),
    ]
    before = model(nodes, [value("x", [2]), value("c", [], TensorProto.BOOL)], [value("y", [2])])
    after, changes = cse.run(before)
    assert changes == 1
    assert_rewrite(before, after, ["Relu", "If"])
    assert [a.g.node[0].input[0] for a in after.graph.node[1].attribute] == ["r1", "r1"]
