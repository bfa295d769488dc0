"""ViT-like classifier: 4x4 patch embedding Conv (stride = patch) on [batch, 3, 32, 32],
Reshape/Transpose to 64 tokens of width 64 plus a position embedding, two pre-norm encoder
layers (2 heads, GELU FFN of 256), final LayerNormalization, ReduceMean over tokens and a
MatMul + Add head to 10 classes."""

import numpy as np

from metainfer_core.zoo._builder import GraphBuilder

PATCH, HIDDEN, HEADS, FFN, LAYERS = 4, 64, 2, 256, 2
TOKENS = (32 // PATCH) ** 2


def build(seed: int = 0):
    b = GraphBuilder("vit_tiny", seed)
    x = b.input("input", [3, 32, 32])
    name = b.unique("Conv")
    w = b.param(f"{name}.weight", b.he((HIDDEN, 3, PATCH, PATCH), 3 * PATCH * PATCH, gain=1.0))
    bias = b.param(f"{name}.bias", b.small((HIDDEN,)))
    x = b.op("Conv", [x, w, bias], name, kernel_shape=[PATCH, PATCH], strides=[PATCH, PATCH])
    # [batch, hidden, h, w] -> [batch, tokens, hidden]
    x = b.op("Reshape", [x, b.const([0, HIDDEN, TOKENS], np.int64)])
    x = b.op("Transpose", [x], perm=[0, 2, 1])
    x = b.op("Add", [x, b.param("pos_embedding", b.small((TOKENS, HIDDEN), 0.5))])
    for _ in range(LAYERS):
        x = b.encoder_layer(x, TOKENS, HIDDEN, HEADS, FFN)
    x = b.op("ReduceMean", [b.layer_norm(x, HIDDEN)], axes=[1], keepdims=0)
    return b.model({"logits": b.linear(x, HIDDEN, 10)})
