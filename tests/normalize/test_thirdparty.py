"""normalize on every zoo model and on real PP-OCR exports (PaddlePaddle via Paddle2ONNX): each
comes out complete (every tensor's dtype and rank known), equivalent to the original (checked by
normalize itself, and again here on other inputs), valid under the full checker, and smaller
wherever there is something to fold."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from thirdparty import PPOCR, ppocr

from metainfer_core import zoo
from metainfer_core.normalize import load_model, normalize
from metainfer_core.normalize.equivalence import random_inputs
from metainfer_core.normalize.shapes import bind_input_shapes, check_complete, unknown_negative_dims

from .graphs import ATOL, RTOL, run

NODE_COUNTS: dict[str, tuple[int, int]] = {}  # model -> (before, after), printed at the end


def _load(key: str) -> tuple[onnx.ModelProto, dict[str, list[int]] | None]:
    if key in PPOCR:
        third_party = ppocr(key)
        return load_model(third_party.path), third_party.input_shapes
    return zoo.build(key, seed=0), None


@pytest.fixture(scope="module", params=[*zoo.names(), *PPOCR])
def normalized(request):
    original, shapes = _load(request.param)
    result = normalize(original, input_shapes=shapes)
    NODE_COUNTS[request.param] = (result.nodes_before, result.nodes_after)
    return request.param, original, shapes, result


@pytest.fixture(scope="module", autouse=True)
def _print_node_counts():
    yield
    if NODE_COUNTS:
        print("\nnormalize node counts (before -> after):")
        for key, (before, after) in NODE_COUNTS.items():
            print(f"  {key:20s} {before:4d} -> {after:4d}")


def _foldable(model: onnx.ModelProto) -> list[str]:
    """What the passes are sure to remove: Constant/Identity/Dropout nodes, BN right after a Conv."""
    producers = {o: n for n in model.graph.node for o in n.output}
    found = [n.op_type for n in model.graph.node if n.op_type in ("Constant", "Identity", "Dropout")]
    for node in model.graph.node:
        source = producers.get(node.input[0]) if node.input else None
        if node.op_type == "BatchNormalization" and source is not None and source.op_type == "Conv":
            found.append("Conv+BatchNormalization")
    return found


def test_normalized_model_is_complete_and_valid(normalized):
    key, _, shapes, result = normalized
    check_complete(result.model)
    onnx.checker.check_model(result.model, full_check=True)
    assert result.opset_to == 17
    names = [n.name for n in result.model.graph.node]
    assert all(names) and len(set(names)) == len(names)
    if shapes:  # a bound model is static end to end
        assert result.symbolic_dims == shapes


def test_node_count_drops_where_folding_applies(normalized):
    key, original, _, result = normalized
    assert result.nodes_after <= result.nodes_before
    if _foldable(original):
        assert result.nodes_after < result.nodes_before, (key, _foldable(original)[:5])
    remaining = {n.op_type for n in result.model.graph.node}
    assert not remaining & {"Constant", "Identity", "Dropout"}, key


def test_same_outputs_as_the_original_on_fresh_inputs(normalized):
    key, original, shapes, result = normalized
    assert all(err <= ATOL + RTOL for err in result.max_abs_err.values()), result.max_abs_err
    reference = bind_input_shapes(unknown_negative_dims(original), shapes)
    feeds = random_inputs(reference, seed=7)
    for want, got in zip(run(reference, feeds), run(result.model, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=key)


@pytest.mark.parametrize("key", ["ppocr_det", "ppocr_cls"])
def test_ppocr_normalizes_with_its_dynamic_dims_unbound(key):
    """Without a binding the dims stay symbolic (the cls model's -1 reads as unknown, '?')."""
    result = normalize(load_model(ppocr(key).path))
    dims = result.symbolic_dims["x"]
    assert dims[1] == 3 and all(isinstance(d, str) for d in (dims[0], dims[2], dims[3]))
    check_complete(result.model)
