"""Plain multilayer perceptron: input [batch, 256], three hidden layers of MatMul + Add bias +
Relu (width 512), then a MatMul + Add output layer to 10 classes."""

from metainfer_core.zoo._builder import GraphBuilder


def build(seed: int = 0):
    b = GraphBuilder("mlp", seed)
    x, width = b.input("input", [256]), 256
    for _ in range(3):
        x, width = b.relu(b.linear(x, width, 512, gain=2.0)), 512
    return b.model({"logits": b.linear(x, width, 10)})
