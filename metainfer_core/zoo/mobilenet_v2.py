"""MobileNetV2 1.0 at full size (Sandler et al.; the torchvision table): input [batch, 3, 224,
224], 1000 classes, 3.5 M parameters, 300 M multiply-accumulates. Not one of the tiny zoo models
the flows iterate: a reference network whose latency vendors publish, so the modeled targets can
be checked against those figures (tests/backends/test_published_latency.py). Seeded random
weights: latency does not depend on their values."""

from metainfer_core.zoo._builder import GraphBuilder
from metainfer_core.zoo.mobilenet_v2_tiny import _inverted_residual

# (expansion, output channels, repeats, first stride)
_SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
             (6, 320, 1, 1)]


def build(seed: int = 0):
    b = GraphBuilder("mobilenet_v2", seed)
    x = b.conv_bn(b.input("input", [3, 224, 224]), 3, 32, 3, 2, act=b.relu6)
    cin = 32
    for t, cout, n, s in _SETTINGS:
        for i in range(n):
            x = _inverted_residual(b, x, cin, cout, t, s if i == 0 else 1)
            cin = cout
    x = b.conv_bn(x, cin, 1280, 1, act=b.relu6)
    return b.model({"logits": b.classifier(x, 1280, 1000)})
