"""Real inputs everywhere in normalize (issue 20): the equivalence check and shape filling from a
run take the caller's samples (data.inputs) when given; without them, random integer inputs
respect what the graph tells (indices of a Gather within its table, compared values in [0, 2)),
and a run that still fails names the integer inputs and data.inputs."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from metainfer_core.errors import MetaInferError
from metainfer_core.normalize import normalize
from metainfer_core.normalize.equivalence import random_inputs
from metainfer_core.ir.graph_utils import tensor_shapes
from metainfer_core.ir.tensors import integer_input_ranges, random_feeds

from .graphs import const, growing_loop, model, value, weights

INT64 = TensorProto.INT64


def _encoder_embeddings():
    """A transformer encoder's embeddings: word ids index a 30-row table, token_type_ids (valid
    0..1) a 2-row one through Cast -> Unsqueeze -> Reshape, the attention mask is compared with 0."""
    nodes = [
        helper.make_node("Gather", ["word_table", "input_ids"], ["words"], name="g_words"),
        helper.make_node("Cast", ["token_type_ids"], ["tt32"], to=TensorProto.INT32),
        helper.make_node("Unsqueeze", ["tt32", "axes0"], ["tt_u"]),
        helper.make_node("Reshape", ["tt_u", "shape_18"], ["tt_r"]),
        helper.make_node("Gather", ["type_table", "tt_r"], ["types"], name="g_types"),
        helper.make_node("Add", ["words", "types"], ["emb"]),
        helper.make_node("Equal", ["attention_mask", "zero"], ["masked"]),
        helper.make_node("Unsqueeze", ["masked", "axes2"], ["masked_u"]),
        helper.make_node("Where", ["masked_u", "neg", "emb"], ["y"]),
    ]
    inits = [const("word_table", weights([30, 4])), const("type_table", weights([2, 4], seed=1)),
             const("axes0", np.array([0], np.int64)), const("shape_18", np.array([1, 8], np.int64)),
             const("zero", np.array(0, np.int64)), const("axes2", np.array([2], np.int64)),
             const("neg", np.array(-1e4, np.float32))]
    inputs = [value(n, [1, 8], INT64) for n in ("input_ids", "token_type_ids", "attention_mask")]
    return model(nodes, inputs, [value("y", [1, 8, 4])], inits)


def test_integer_inputs_get_the_range_the_graph_allows():
    m = _encoder_embeddings()
    ranges = integer_input_ranges(m)
    assert (ranges["input_ids"].low, ranges["input_ids"].high) == (0, 30)
    assert (ranges["token_type_ids"].low, ranges["token_type_ids"].high) == (0, 2)
    assert "Gather" in ranges["token_type_ids"].why
    assert (ranges["attention_mask"].low, ranges["attention_mask"].high) == (0, 2)
    for feeds in (random_inputs(m, seed=3), random_feeds(m, seed=3)):
        assert feeds["token_type_ids"].max() <= 1 and feeds["input_ids"].max() < 30
        assert feeds["input_ids"].max() >= 4                 # the whole table, not [0, 4)


def test_a_type_id_input_indexing_a_two_row_table_normalizes_on_random_inputs():
    result = normalize(_encoder_embeddings(), seed=0)        # [0, 4) ids: 'idx=3 must be within [-2,1]'
    assert result.max_abs_err["y"] <= 1e-5 and not result.real_inputs


def _reshape_by_input():
    """x reshaped to the shape an integer input holds: no random value can stand for it."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    return model(nodes, [value("x", [6]), value("shape", [2], INT64)], [value("y", [None, None])])


def test_a_run_failing_on_random_inputs_names_the_integer_input_and_data_inputs():
    with pytest.raises(MetaInferError, match=r"'shape' in \[1, 4\).*data\.inputs=<file\.npz>"):
        normalize(_reshape_by_input(), seed=0)


def test_the_equivalence_check_runs_on_the_given_samples():
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal(6).astype(np.float32), "shape": np.array(s, np.int64)}
             for s in ([2, 3], [3, 2])]
    result = normalize(_reshape_by_input(), feeds=feeds)
    assert result.real_inputs and result.max_abs_err["y"] <= 1e-5


def test_samples_that_do_not_fit_the_model_are_named_as_data_inputs():
    feeds = [{"x": np.zeros(6, np.float32), "shape": np.array([4, 4], np.int64)}]
    with pytest.raises(MetaInferError, match="data.inputs"):
        normalize(_reshape_by_input(), feeds=feeds)


def test_shapes_filled_from_a_run_come_from_the_given_samples():
    # the trip count is an input: random counts disagree (rank only); real ones agree on the size
    feeds = [{"x": np.ones((2, 3), np.float32), "n": np.array(2, np.int64)} for _ in range(3)]
    result = normalize(growing_loop("grow"), feeds=feeds)
    assert tensor_shapes(result.model.graph)["y"] == [6, 3]
    assert tensor_shapes(normalize(growing_loop("grow")).model.graph)["y"] == [None, 3]
