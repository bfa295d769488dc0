"""MobileNetV2 1.0 at full size (Sandler et al.; the torchvision table): input [batch, 3, 224,
224], 1000 classes, 3.5 M parameters, 300 M multiply-accumulates. Not one of the tiny zoo models
the flows iterate: a reference network whose latency vendors publish, so the modeled targets can
be checked against those figures (tests/zoo/test_published_latency.py). Seeded random
weights: latency does not depend on their values."""

from metainfer_core.zoo.mobilenet_v2_tiny import mobilenet_v2

# (expansion, output channels, repeats, first stride)
_SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
             (6, 320, 1, 1)]


def build(seed: int = 0):
    return mobilenet_v2("mobilenet_v2", seed, 224, 32, _SETTINGS, 1280, 1000)
