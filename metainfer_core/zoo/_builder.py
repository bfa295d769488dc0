"""Graph-building helpers shared by the zoo models.

`GraphBuilder` hands out unique node names, seeded weights and the blocks the models are
made of (conv-bn-act, linear, layer norm, attention), so each model file only describes its
topology. Weights are He-scaled and batch-norm statistics non-trivial, so outputs stay of
order one and a Conv+BN fold has real work to do.
"""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 10  # older runtimes refuse models with a newer IR version
PRODUCER = "meta-infer-zoo"


class GraphBuilder:
    def __init__(self, name: str, seed: int):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self._counts: dict[str, int] = {}
        self._consts: dict[tuple, str] = {}

    # --- names, inputs, parameters -------------------------------------------------------

    def unique(self, prefix: str) -> str:
        n = self._counts.get(prefix, 0)
        self._counts[prefix] = n + 1
        return f"{prefix}_{n}"

    def input(self, name: str, shape: list[int], elem_type: int = TensorProto.FLOAT) -> str:
        """A graph input whose leading dim is the symbolic batch."""
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, ["batch", *shape]))
        return name

    def param(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def he(self, shape: tuple, fan_in: int, gain: float = 2.0) -> np.ndarray:
        return (self.rng.standard_normal(shape) * np.sqrt(gain / fan_in)).astype(np.float32)

    def small(self, shape: tuple, std: float = 0.1) -> np.ndarray:
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def const(self, value, dtype=np.float32) -> str:
        """Scalars and shapes, shared: one initializer per distinct value."""
        arr = np.asarray(value, dtype=dtype)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key not in self._consts:
            self._consts[key] = self.param(self.unique("const"), arr)
        return self._consts[key]

    def op(self, op_type: str, inputs: list[str], name: str | None = None, **attrs) -> str:
        name = name or self.unique(op_type)
        out = f"{name}_out"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    # --- convolutional blocks --------------------------------------------------------------

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1,
             bias: bool = False, gain: float = 2.0) -> str:
        name = self.unique("Conv")
        fan_in = cin // group * k * k
        w = self.he((cout, cin // group, k, k), fan_in, gain)
        inputs = [x, self.param(f"{name}.weight", w)]
        if bias:
            inputs.append(self.param(f"{name}.bias", self.small((cout,))))
        return self.op("Conv", inputs, name, kernel_shape=[k, k], strides=[stride, stride],
                       pads=[k // 2] * 4, group=group)

    def conv_transpose(self, x: str, cin: int, cout: int) -> str:
        """A 2x2 stride-2 ConvTranspose with bias: a segmentation decoder's upsampling."""
        name = self.unique("ConvTranspose")
        w = self.param(f"{name}.weight", self.he((cin, cout, 2, 2), cin))
        bias = self.param(f"{name}.bias", self.small((cout,)))
        return self.op("ConvTranspose", [x, w, bias], name, kernel_shape=[2, 2], strides=[2, 2])

    def bn(self, x: str, c: int, scale: float = 1.0) -> str:
        """Unfused BatchNormalization whose stats differ from identity, as exporters leave it."""
        name = self.unique("BatchNormalization")
        u = self.rng.uniform
        inputs = [x,
                  self.param(f"{name}.weight", (scale * u(0.5, 1.5, c)).astype(np.float32)),
                  self.param(f"{name}.bias", self.small((c,))),
                  self.param(f"{name}.running_mean", self.small((c,))),
                  self.param(f"{name}.running_var", u(0.5, 1.5, c).astype(np.float32))]
        return self.op("BatchNormalization", inputs, name, epsilon=1e-5)

    def relu(self, x: str) -> str:
        return self.op("Relu", [x])

    def relu6(self, x: str) -> str:
        return self.op("Clip", [x, self.const(0.0), self.const(6.0)])

    def swish(self, x: str) -> str:
        return self.op("Mul", [x, self.op("Sigmoid", [x])])

    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1,
                act=None, bias: bool = False, bn_scale: float = 1.0) -> str:
        """Conv -> BatchNormalization -> optional activation (a builder method such as relu)."""
        y = self.bn(self.conv(x, cin, cout, k, stride, group, bias), cout, bn_scale)
        return act(y) if act else y

    def classifier(self, x: str, c: int, classes: int, gain: float = 1.0) -> str:
        """GlobalAveragePool -> Flatten -> Gemm, the torchvision head as exported."""
        name = self.unique("Gemm")
        flat = self.op("Flatten", [self.op("GlobalAveragePool", [x])], axis=1)
        w = self.param(f"{name}.weight", self.he((classes, c), c, gain))
        b = self.param(f"{name}.bias", self.small((classes,)))
        return self.op("Gemm", [flat, w, b], name, transB=1)

    # --- transformer blocks ----------------------------------------------------------------

    def linear(self, x: str, din: int, dout: int, gain: float = 1.0) -> str:
        """MatMul + Add bias, as exporters emit nn.Linear on 3-D inputs."""
        name = self.unique("MatMul")
        y = self.op("MatMul", [x, self.param(f"{name}.weight", self.he((din, dout), din, gain))],
                    name)
        return self.op("Add", [y, self.param(f"{name}.bias", self.small((dout,)))])

    def layer_norm(self, x: str, d: int) -> str:
        name = self.unique("LayerNormalization")
        scale = self.param(f"{name}.weight", self.rng.uniform(0.8, 1.2, d).astype(np.float32))
        bias = self.param(f"{name}.bias", self.small((d,), 0.02))
        return self.op("LayerNormalization", [x, scale, bias], name, axis=-1, epsilon=1e-5)

    def gelu(self, x: str) -> str:
        """Exact GELU spelled with Erf (the Gelu op needs opset 20)."""
        erf = self.op("Erf", [self.op("Div", [x, self.const(np.sqrt(2.0))])])
        return self.op("Mul", [self.op("Mul", [x, self.op("Add", [erf, self.const(1.0)])]),
                               self.const(0.5)])

    def encoder_layer(self, x: str, seq: int, d: int, heads: int, ffn: int) -> str:
        """Pre-norm transformer encoder layer: multi-head self-attention, then a GELU FFN."""
        dh = d // heads
        h = self.layer_norm(x, d)

        def to_heads(t: str, perm: list[int]) -> str:
            split = self.op("Reshape", [t, self.const([0, seq, heads, dh], np.int64)])
            return self.op("Transpose", [split], perm=perm)

        q = to_heads(self.linear(h, d, d), [0, 2, 1, 3])
        k = to_heads(self.linear(h, d, d), [0, 2, 3, 1])  # pre-transposed for Q @ K^T
        v = to_heads(self.linear(h, d, d), [0, 2, 1, 3])
        scores = self.op("Div", [self.op("MatMul", [q, k]), self.const(np.sqrt(dh))])
        ctx = self.op("MatMul", [self.op("Softmax", [scores], axis=-1), v])
        ctx = self.op("Transpose", [ctx], perm=[0, 2, 1, 3])
        ctx = self.op("Reshape", [ctx, self.const([0, seq, d], np.int64)])
        x = self.op("Add", [x, self.linear(ctx, d, d)])
        h = self.gelu(self.linear(self.layer_norm(x, d), d, ffn, gain=2.0))
        return self.op("Add", [x, self.linear(h, ffn, d)])

    # --- the model -------------------------------------------------------------------------

    def model(self, outputs: dict[str, str]) -> onnx.ModelProto:
        """Finish the graph; `outputs` maps each output's public name to the tensor it renames.

        Output types come from shape inference, so no model file spells them by hand."""
        renames = {tensor: public for public, tensor in outputs.items()}
        for node in self.nodes:
            node.input[:] = [renames.get(t, t) for t in node.input]
            node.output[:] = [renames.get(t, t) for t in node.output]
        graph = helper.make_graph(
            self.nodes, self.name, self.inputs,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
            self.initializers)
        model = helper.make_model(graph, producer_name=PRODUCER, ir_version=IR_VERSION,
                                  opset_imports=[helper.make_opsetid("", OPSET)])
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        for out, typed in zip(model.graph.output, inferred.graph.output):
            out.type.CopyFrom(typed.type)
            # Resize by scales loses the batch symbol; every zoo output leads with the batch.
            out.type.tensor_type.shape.dim[0].dim_param = "batch"
        onnx.checker.check_model(model, full_check=True)
        return model
