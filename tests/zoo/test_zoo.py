"""The built-in zoo: every model is valid ONNX, runs on ONNX Runtime at two batch sizes with
informative outputs, is reproducible from its seed, and unknown names fail clearly."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from metainfer_core import zoo
from metainfer_core.errors import MetaInferError

CNNS = ["resnet_tiny", "mobilenet_v2_tiny", "efficientnet_tiny", "unet_tiny"]


@pytest.fixture(scope="module", params=zoo.names())
def built(request):
    return request.param, zoo.build(request.param, seed=0)


def _feeds(model: onnx.ModelProto, batch: int, rng: np.random.Generator) -> dict:
    """Random normal floats; int64 ids drawn below the vocabulary of the Gather that reads them."""
    inits = {t.name: t for t in model.graph.initializer}
    feeds = {}
    for inp in model.graph.input:
        shape = [batch if d.dim_param else d.dim_value for d in inp.type.tensor_type.shape.dim]
        if inp.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            vocab = min(inits[n.input[0]].dims[0] for n in model.graph.node
                        if n.op_type == "Gather" and n.input[1] == inp.name)
            feeds[inp.name] = rng.integers(0, vocab, shape, dtype=np.int64)
        else:
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def test_names_cover_the_zoo():
    assert set(zoo.names()) == {"resnet_tiny", "mobilenet_v2_tiny", "efficientnet_tiny",
                                "unet_tiny", "bert_tiny", "vit_tiny", "mlp"}


def test_model_is_valid(built):
    name, model = built
    onnx.checker.check_model(model, full_check=True)
    onnx.shape_inference.infer_shapes(model, strict_mode=True)
    assert model.ir_version == 10
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    assert model.producer_name == "meta-infer-zoo"
    for inp in model.graph.input:
        dims = inp.type.tensor_type.shape.dim
        assert dims[0].dim_param == "batch"
        assert all(d.dim_value > 0 for d in dims[1:])
    assert 10 <= len(model.graph.node) <= 200
    assert len({n.name for n in model.graph.node}) == len(model.graph.node)


@pytest.mark.parametrize("batch", [1, 2])
def test_runs_with_informative_outputs(built, batch):
    name, model = built
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    outputs = session.run(None, _feeds(model, batch, np.random.default_rng(batch)))
    for out in outputs:
        assert out.shape[0] == batch
        assert np.isfinite(out).all(), name
        assert out.std() > 1e-3, name


def test_seed_reproducible(built):
    name, model = built
    assert zoo.build(name, seed=0).SerializeToString() == model.SerializeToString()
    other = zoo.build(name, seed=1)
    assert any(a.raw_data != b.raw_data
               for a, b in zip(model.graph.initializer, other.graph.initializer))


@pytest.mark.parametrize("name", CNNS)
def test_cnns_keep_batchnorm_unfused(name):
    model = zoo.build(name)
    assert any(n.op_type == "BatchNormalization" for n in model.graph.node)
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    if name != "unet_tiny":  # unet deliberately keeps conv biases before its BNs
        assert any(len(n.input) == 2 for n in convs), "expected bias-free convs before BN"


def test_unknown_name_lists_valid_options():
    with pytest.raises(MetaInferError) as err:
        zoo.build("resnet_huge")
    message = str(err.value)
    assert "resnet_huge" in message
    assert all(name in message for name in zoo.names())
    assert "\n" not in message
