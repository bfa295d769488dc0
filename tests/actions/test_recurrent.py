"""The recurrent family: Keras-style recurrence loops (built the way tf2onnx writes them, at random
weights: metainfer_core/zoo/keras_rnn.py) into ONNX's LSTM / GRU / RNN, checked
against ONNX Runtime on the loop at several sequence lengths (RTOL/ATOL) and by onnx.checker's
full check; and the bodies it must leave alone, each with its reason in the search's log."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from metainfer_core.actions import ACTIONS, ActionContext, expand
from metainfer_core.zoo.keras_rnn import keras_rnn
from metainfer_core.normalize import normalize

from action_checks import ATOL, RTOL, ops, same_numerics
from twins import backend

RECURRENT = ACTIONS["recurrent"]
LENGTHS = (1, 5, 12)          # sequence lengths every rewrite is checked at (the model's T is symbolic)


def feeds_at(model: onnx.ModelProto, steps: int, batch: int = 3, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed + steps)
    dims = {"T": steps, "N": batch}
    return {i.name: rng.standard_normal([dims.get(d.dim_param, d.dim_value) for d in i.type.tensor_type.shape.dim])
            .astype(np.float32) for i in model.graph.input}


def rewritten(model: onnx.ModelProto, target: str = "cpu") -> onnx.ModelProto:
    info = backend(target).info
    sites = RECURRENT.sites(model, {}, info)
    assert sites, "no site"
    assert RECURRENT.legal(model, sites[0], {}, info) is None, RECURRENT.legal(model, sites[0], {}, info)
    out = RECURRENT.apply(model, sites[0], {}, ActionContext(target=info))
    onnx.checker.check_model(out, full_check=True)
    assert not ops(out)["Loop"] and not ops(out)["Scan"]
    return out


def same_at_every_length(before: onnx.ModelProto, after: onnx.ModelProto, **dims) -> None:
    same_numerics(before, after, [feeds_at(before, t, **dims) for t in LENGTHS], rtol=RTOL, atol=ATOL)


CASES = {
    "lstm": ({}, "LSTM", 1),
    "lstm_time_major": ({"batch_major": False}, "LSTM", 1),
    "lstm_read_along_axis_1": ({"gather_axis": 1}, "LSTM", 1),
    "lstm_last_step_only": ({"return_sequences": False}, "LSTM", 1),
    "lstm_states_in_and_out": ({"return_sequences": False, "return_state": True, "initial": "input"}, "LSTM", 1),
    "lstm_initial_state_input": ({"initial": "input"}, "LSTM", 1),
    "lstm_keras_hard_sigmoid": ({"recurrent_activation": "hard_sigmoid"}, "LSTM", 1),
    "lstm_hard_sigmoid_op": ({"recurrent_activation": "HardSigmoid"}, "LSTM", 1),
    "lstm_relu": ({"activation": "relu"}, "LSTM", 1),
    "lstm_counter_and_less": ({"counter": True, "cond": "less"}, "LSTM", 1),
    "lstm_tf2onnx_condition_carried_weights": ({"counter": True, "cond": "tf2onnx", "carried_weights": True}, "LSTM", 1),
    "gru_tf2onnx_condition_carried_weights": ({"cell": "gru", "counter": True, "cond": "tf2onnx", "carried_weights": True,
                                               "layers": 2}, "GRU", 2),
    "lstm_opset_11": ({"opset": 11}, "LSTM", 1),
    "lstm_scan": ({"loop": "Scan"}, "LSTM", 1),
    "lstm_scan_axis_1": ({"loop": "Scan", "gather_axis": 1}, "LSTM", 1),
    "gru_reset_after": ({"cell": "gru"}, "GRU", 1),
    "gru_reset_before": ({"cell": "gru", "reset_after": False}, "GRU", 1),
    "gru_reset_before_time_major_states": ({"cell": "gru", "reset_after": False, "batch_major": False,
                                            "initial": "input", "return_state": True}, "GRU", 1),
    "gru_hard_sigmoid_opset_17": ({"cell": "gru", "recurrent_activation": "hard_sigmoid", "opset": 17}, "GRU", 1),
    "rnn": ({"cell": "rnn"}, "RNN", 1),
    "rnn_relu_time_major_last": ({"cell": "rnn", "activation": "relu", "batch_major": False,
                                  "return_sequences": False, "initial": "input"}, "RNN", 1),
    "two_layers": ({"layers": 2}, "LSTM", 2),
    "bidirectional": ({"bidirectional": True}, "LSTM", 2),
    "bidirectional_gru_last": ({"cell": "gru", "bidirectional": True, "return_sequences": False}, "GRU", 2),
    # tf2onnx's while-loop bounds: no trip count (or INT64_MAX), ended by Less(float(t + 1), float(T))
    "lstm_tf2onnx_max_iterations": ({"bounds": "tf2onnx_max"}, "LSTM", 1),
    "lstm_tf2onnx_max_iterations_axis_1": ({"bounds": "tf2onnx_max", "gather_axis": 1, "layers": 2}, "LSTM", 2),
    "gru_tf2onnx_no_trip_count_carried_weights": ({"cell": "gru", "bounds": "tf2onnx_none", "carried_weights": True},
                                                  "GRU", 1),
    # Keras' implementation=1 cells: per-gate MatMuls on cut weights, ones_like dropout Muls
    "lstm_per_gate": ({"per_gate": True}, "LSTM", 1),
    "lstm_per_gate_dropout_hard_sigmoid_tf2onnx": ({"per_gate": True, "dropout_ones": 1.0, "bounds": "tf2onnx_max",
                                                    "recurrent_activation": "hard_sigmoid_minmax",
                                                    "carried_weights": True}, "LSTM", 1),
    "gru_per_gate_reset_before_bidirectional": ({"cell": "gru", "reset_after": False, "per_gate": True,
                                                 "dropout_ones": 1.0, "bounds": "tf2onnx_none", "bidirectional": True,
                                                 "recurrent_activation": "hard_sigmoid_minmax"}, "GRU", 2),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_keras_loop_becomes_the_onnx_operator(case):
    kwargs, op, count = CASES[case]
    m = keras_rnn(**kwargs)
    out = rewritten(m)
    assert ops(out)[op] == count
    if op == "GRU":
        lbr = {a.name: a.i for n in out.graph.node if n.op_type == "GRU" for a in n.attribute}["linear_before_reset"]
        assert lbr == int(kwargs.get("reset_after", True))
    same_at_every_length(m, out)


def test_lstm_gates_land_in_onnx_order():
    """Keras' kernel columns i, f, c, o become ONNX's rows i, o, f, c; the bias goes to Wb, Rb is zero."""
    m = keras_rnn(features=3, hidden=2)
    init = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    out = rewritten(m)
    got = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}
    lstm = next(n for n in out.graph.node if n.op_type == "LSTM")
    w, r, b = (got[lstm.input[k]] for k in (1, 2, 3))
    i, f, c, o = np.split(init["l0/kernel"], 4, axis=1)
    np.testing.assert_array_equal(w[0], np.concatenate([i, o, f, c], axis=1).T)
    i, f, c, o = np.split(init["l0/recurrent"], 4, axis=1)
    np.testing.assert_array_equal(r[0], np.concatenate([i, o, f, c], axis=1).T)
    i, f, c, o = np.split(init["l0/bias"], 4)
    np.testing.assert_array_equal(b[0], np.concatenate([i, o, f, c, np.zeros(8, np.float32)]))


def test_the_sequence_dim_stays_symbolic():
    m = keras_rnn(layers=2)
    out = onnx.shape_inference.infer_shapes(rewritten(m), strict_mode=True)
    shapes = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in out.graph.value_info}
    assert shapes["l1/output"] == ["N", "T", 16] and shapes["l0/sequence"] == ["T", "N", 16]


def test_static_shapes_and_a_normalized_graph():
    """After normalize (constants folded, Identity gone, CSE) and with static dims the loops are
    still proved: the trip count is then a constant equal to the static length."""
    m = keras_rnn(layers=2, steps=7, batch=2, return_sequences=False, return_state=True)
    n = normalize(m, None).model
    out = rewritten(n)
    assert ops(out)["LSTM"] == 2
    feeds = [feeds_at(m, 7, batch=2, seed=s) for s in range(3)]
    same_numerics(m, out, feeds)
    symbolic = normalize(keras_rnn(cell="gru"), None).model
    same_at_every_length(symbolic, rewritten(symbolic))


def test_the_input_is_never_edited_and_zero_states_need_no_initial_state():
    m = keras_rnn(layers=2)
    before = m.SerializeToString()
    out = rewritten(m)
    assert m.SerializeToString() == before
    lstm = [n for n in out.graph.node if n.op_type == "LSTM"]
    assert all(len(n.input) == 4 for n in lstm)          # X, W, R, B: the ConstantOfShape zeros are gone
    assert not ops(out)["ConstantOfShape"] and not ops(out)["Unsqueeze"]


def test_a_target_without_the_operator_refuses():
    m = keras_rnn()
    npu = backend("npu").info
    site = RECURRENT.sites(m, {}, npu)[0]
    assert "does not run LSTM" in RECURRENT.legal(m, site, {}, npu)


def test_words_name_the_scope():
    m = keras_rnn(layers=2)
    site = RECURRENT.sites(m, {}, backend("cpu").info)[0]
    short, sentence = RECURRENT.words({}, site.label)
    assert site.label == "2 loops (LSTM, LSTM)" and "2 loops (LSTM, LSTM)" in sentence and short


# --- bodies it must leave alone ------------------------------------------------------------------


def _body(m: onnx.ModelProto, loop: str = "l0/while") -> onnx.GraphProto:
    node = next(n for n in m.graph.node if n.name == loop)
    return next(a.g for a in node.attribute if a.name == "body")


def _insert(body: onnx.GraphProto, before: str, *nodes: onnx.NodeProto) -> None:
    k = next(i for i, n in enumerate(body.node) if n.name == before)
    for j, n in enumerate(nodes):
        body.node.insert(k + j, n)


def _reader(body: onnx.GraphProto, op: str, tensor_suffix: str) -> onnx.NodeProto:
    return next(n for n in body.node if n.op_type == op and n.input[0].endswith(tensor_suffix))


def _peephole(m):
    """i = sigmoid(z_i + c·p): the input gate peeks at the cell state."""
    body = _body(m)
    gate = _reader(body, "Sigmoid", "_0")
    p = helper.make_node("Constant", [], ["peep"], value=numpy_helper.from_array(np.full(16, 0.1, np.float32)))
    _insert(body, gate.name, p, helper.make_node("Mul", ["l0/c", "peep"], ["peeked"], name="peek"),
            helper.make_node("Add", [gate.input[0], "peeked"], ["with_peep"], name="with_peep"))
    gate.input[0] = "with_peep"


def _swish(m):
    """The cell candidate through a custom activation (swish: z·sigmoid(z))."""
    body = _body(m)
    tanh = _reader(body, "Tanh", "_2")
    z = tanh.input[0]
    _insert(body, tanh.name, helper.make_node("Sigmoid", [z], ["swish_s"], name="swish_s"))
    tanh.op_type, tanh.input[:] = "Mul", [z, "swish_s"]


def _state_read_elsewhere(m):
    """A second scan output reads the cell state."""
    body, loop = _body(m), next(n for n in m.graph.node if n.op_type == "Loop")
    two = helper.make_node("Constant", [], ["two"], value=numpy_helper.from_array(np.float32(2.0)))
    body.node.extend([two, helper.make_node("Mul", ["l0/c", "two"], ["c_twice"], name="c_twice")])
    body.output.append(helper.make_tensor_value_info("c_twice", TensorProto.FLOAT, ["N", 16]))
    loop.output.append("c_sequence")
    m.graph.output.append(helper.make_tensor_value_info("c_sequence", TensorProto.FLOAT, ["T", "N", 16]))


def _dropout_mask(m):
    """Recurrent dropout: h·mask before the recurrent kernel."""
    body = _body(m)
    mm = next(n for n in body.node if n.op_type == "MatMul" and n.input[0] == "l0/h")
    mask = helper.make_node("Constant", [], ["mask"], value=numpy_helper.from_array(np.full(16, 0.5, np.float32)))
    _insert(body, mm.name, mask, helper.make_node("Mul", ["l0/h", "mask"], ["dropped"], name="dropout"))
    mm.input[0] = "dropped"


def _short_trip(m):
    """A constant trip count on a sequence of symbolic length."""
    m.graph.initializer.append(numpy_helper.from_array(np.int64(5), "five"))
    next(n for n in m.graph.node if n.op_type == "Loop").input[0] = "five"


def _early_exit(m):
    """The condition stops after three steps."""
    body = _body(m)
    three = helper.make_node("Constant", [], ["three"], value=numpy_helper.from_array(np.int64(3)))
    old = body.output[0].name
    body.node.extend([three, helper.make_node("Less", ["l0/i", "three"], ["stop"], name="stop")])
    body.node.remove(next(n for n in body.node if old in n.output))
    body.output[0].name = "stop"


def _masked(m):
    """Keras' masking: a mask read per step keeps the old state where it is false."""
    body = _body(m)
    m.graph.input.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, ["T", "N", 1]))
    h_new = body.output[1].name
    body.node.extend([helper.make_node("Gather", ["mask", "l0/i"], ["mask_t"], name="mask_t", axis=0),
                      helper.make_node("Where", ["mask_t", h_new, "l0/h"], ["h_kept"], name="keep")])
    body.output[1].name = "h_kept"


REFUSED = {
    "peephole": (_peephole, "the input gate's input is not x·W + h·R + b (Mul 'peek'"),
    "custom_activation": (_swish, "the cell candidate is not squashed by"),
    "state_read_elsewhere": (_state_read_elsewhere, "the state 'l0/c' is read outside the cell (Mul 'c_twice')"),
    "dropout_mask": (_dropout_mask, "'dropped' beside the step input and the state (a dropout mask"),
    "trip_count": (_short_trip, "the trip count is not the sequence length"),
    "early_exit": (_early_exit, "the loop's condition may end it before the sequence does"),
    "masked": (_masked, "reads 2 sequences per step (a mask"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_body_it_cannot_prove_is_left_alone_with_its_reason(case):
    edit, reason = REFUSED[case]
    m = keras_rnn(cell="gru" if case == "masked" else "lstm")
    edit(m)
    onnx.checker.check_model(m, full_check=True)
    info = backend("cpu").info
    sites = RECURRENT.sites(m, {}, info)
    assert [s.nodes for s in sites] == [("l0/while",)]
    why = RECURRENT.legal(m, sites[0], {}, info)
    assert why and reason in why and "\n" not in why, why
    illegal = {}
    assert not list(expand(m, {"recurrent": {}}, info, illegal=illegal))
    assert reason in illegal["recurrent"]


def _current_count(m):
    """The condition compares the current count, not the next one: the loop would run one step
    past the sequence."""
    body = _body(m)
    less = next(n for n in body.node if n.op_type == "Less")
    cast = next(n for n in body.node if n.output[0] == less.input[0])
    cast.input[0] = "l0/t"


NEAR_MISSES = {     # builder options, an edit, the reason
    "length_of_another_dim": ({"bounds": "tf2onnx_max", "length_axis": "batch"}, None,
                              "its condition is not proved to end it at the sequence length (dim 0 of 'l0/time_major')"),
    "no_trip_count_current_count": ({"bounds": "tf2onnx_none"}, _current_count,
                                    "its condition is not proved to end it at the sequence length"),
    "dropout_not_ones": ({"per_gate": True, "dropout_ones": 0.8}, None,
                         "beside the step input and the state (a dropout mask"),
}


@pytest.mark.parametrize("case", sorted(NEAR_MISSES))
def test_a_near_miss_of_a_tf2onnx_form_is_left_alone(case):
    kwargs, edit, reason = NEAR_MISSES[case]
    m = keras_rnn(**kwargs)
    if edit:
        edit(m)
    onnx.checker.check_model(m, full_check=True)
    info = backend("cpu").info
    sites = RECURRENT.sites(m, {}, info)
    assert [s.nodes for s in sites] == [("l0/while",)]
    why = RECURRENT.legal(m, sites[0], {}, info)
    assert why and reason in why and "\n" not in why, why


def test_a_proved_loop_is_rewritten_beside_a_refused_one():
    m = keras_rnn(layers=2)
    _peephole(m)                           # layer 0 refused, layer 1 proved
    info = backend("cpu").info
    sites = RECURRENT.sites(m, {}, info)
    assert [s.nodes for s in sites] == [("l1/while",), ("l0/while",)]
    out = RECURRENT.apply(m, sites[0], {}, ActionContext(target=info))
    onnx.checker.check_model(out, full_check=True)
    assert ops(out)["Loop"] == 1 and ops(out)["LSTM"] == 1
    same_at_every_length(m, out)


def test_a_loop_without_a_recurrent_body_is_no_site():
    body = helper.make_graph([helper.make_node("Identity", ["cond"], ["cond_out"]),
                              helper.make_node("Add", ["acc", "x"], ["acc_out"])], "body",
                             [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                              helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("acc", TensorProto.FLOAT, [2])],
                             [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [2])])
    g = helper.make_graph([helper.make_node("Loop", ["n", "", "x"], ["y"], name="sum", body=body)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                          [numpy_helper.from_array(np.int64(3), "n")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert RECURRENT.sites(m, {}, backend("cpu").info) == []
