"""A large U-Net as tf2onnx exports one: a channels-last input [batch, 512, 512, 3] transposed
to NCHW, three encoder levels of two 3x3 conv+ReLU (32, 64, 128 channels; batch norm already
folded into the convs' biases) and 2x2 max pooling, a 160-channel bottleneck, a decoder of 2x2
stride-2 ConvTranspose, skip Concat and two conv+ReLU per level, a 1x1 conv to 2 classes and the
transpose back to channels-last. 1.4 M parameters (5.6 MB) and 40 nodes: few, heavy kernels at a
large resolution. Not one of the tiny zoo models the flows iterate: it is the large model the
time budget is measured on (bench). Seeded random weights."""

from metainfer_core.zoo._builder import GraphBuilder

CHANNELS = (32, 64, 128, 160)    # the encoder levels, then the bottleneck
SIZE = 512


def _double_conv(b: GraphBuilder, x: str, cin: int, cout: int) -> str:
    x = b.relu(b.conv(x, cin, cout, 3, bias=True))
    return b.relu(b.conv(x, cout, cout, 3, bias=True))


def _up(b: GraphBuilder, x: str, cin: int, cout: int) -> str:
    name = b.unique("ConvTranspose")
    w = b.param(f"{name}.weight", b.he((cin, cout, 2, 2), cin))
    bias = b.param(f"{name}.bias", b.small((cout,)))
    return b.op("ConvTranspose", [x, w, bias], name, kernel_shape=[2, 2], strides=[2, 2])


def build(seed: int = 0):
    b = GraphBuilder("unet_nhwc_512", seed)
    x = b.op("Transpose", [b.input("image", [SIZE, SIZE, 3])], perm=[0, 3, 1, 2])
    skips, cin = [], 3
    for c in CHANNELS[:-1]:
        x = _double_conv(b, x, cin, c)
        skips.append((x, c))
        x, cin = b.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2]), c
    x, cin = _double_conv(b, x, cin, CHANNELS[-1]), CHANNELS[-1]
    for skip, c in reversed(skips):
        x, cin = _double_conv(b, b.op("Concat", [_up(b, x, cin, c), skip], axis=1), 2 * c, c), c
    logits = b.conv(x, cin, 2, 1, bias=True, gain=0.25)   # a low gain keeps the logits of order one
    return b.model({"mask": b.op("Transpose", [logits], perm=[0, 2, 3, 1])})
