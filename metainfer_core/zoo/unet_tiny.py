"""U-Net-like segmentation CNN: two encoder levels of (conv-bn-relu) x2 + MaxPool, a
bottleneck, a decoder that upsamples once with nearest Resize and once with ConvTranspose and
concatenates the skip connections, and a final 1x1 conv to 2 classes. The convs carry a bias
before their BN, as some exporters leave it. Input [batch, 3, 64, 64]."""

from metainfer_core.zoo._builder import GraphBuilder


def _double_conv(b: GraphBuilder, x: str, cin: int, cout: int) -> str:
    x = b.conv_bn(x, cin, cout, 3, act=b.relu, bias=True)
    return b.conv_bn(x, cout, cout, 3, act=b.relu, bias=True)


def _pool(b: GraphBuilder, x: str) -> str:
    return b.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])


def build(seed: int = 0):
    b = GraphBuilder("unet_tiny", seed)
    e1 = _double_conv(b, b.input("input", [3, 64, 64]), 3, 16)
    e2 = _double_conv(b, _pool(b, e1), 16, 32)
    mid = _double_conv(b, _pool(b, e2), 32, 64)
    # Resize inputs: X, roi (unused), scales
    up2 = b.op("Resize", [mid, "", b.const([1.0, 1.0, 2.0, 2.0])], mode="nearest")
    d2 = _double_conv(b, b.op("Concat", [up2, e2], axis=1), 64 + 32, 32)
    up1 = b.conv_transpose(d2, 32, 16)
    d1 = _double_conv(b, b.op("Concat", [up1, e1], axis=1), 16 + 16, 16)
    # The ReLU features carry a large mean; a low gain keeps the mask logits of order one.
    return b.model({"mask": b.conv(d1, 16, 2, 1, bias=True, gain=0.25)})
