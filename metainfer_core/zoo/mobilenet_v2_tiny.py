"""MobileNetV2-like CNN: inverted residual blocks (1x1 expand conv-bn-ReLU6, 3x3 depthwise
conv-bn-ReLU6, 1x1 linear projection conv-bn, residual Add when shapes match), ReLU6 as
Clip(0, 6) the way exporters emit it. Input [batch, 3, 64, 64], 10 classes."""

from metainfer_core.zoo._builder import GraphBuilder

# (expansion, output channels, repeats, first stride), a scaled-down torchvision table
_SETTINGS = [(1, 16, 1, 1), (4, 24, 2, 2), (4, 32, 2, 2), (4, 64, 2, 2)]


def _inverted_residual(b: GraphBuilder, x: str, cin: int, cout: int, t: int, stride: int) -> str:
    mid = cin * t
    y = b.conv_bn(x, cin, mid, 1, act=b.relu6) if t != 1 else x
    y = b.conv_bn(y, mid, mid, 3, stride, group=mid, act=b.relu6)
    y = b.conv_bn(y, mid, cout, 1, bn_scale=0.5)
    return b.op("Add", [x, y]) if stride == 1 and cin == cout else y


def mobilenet_v2(name: str, seed: int, size: int, stem: int, settings, head: int, classes: int):
    """The MobileNetV2 body: a stride-2 stem, the inverted-residual stages of `settings`, a 1x1 head."""
    b = GraphBuilder(name, seed)
    x = b.conv_bn(b.input("input", [3, size, size]), 3, stem, 3, 2, act=b.relu6)
    cin = stem
    for t, cout, n, s in settings:
        for i in range(n):
            x = _inverted_residual(b, x, cin, cout, t, s if i == 0 else 1)
            cin = cout
    x = b.conv_bn(x, cin, head, 1, act=b.relu6)
    return b.model({"logits": b.classifier(x, head, classes)})


def build(seed: int = 0):
    return mobilenet_v2("mobilenet_v2_tiny", seed, 64, 16, _SETTINGS, 256, 10)
