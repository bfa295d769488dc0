"""EfficientNet-B0-like CNN: MBConv blocks (1x1 expand conv-bn-swish, depthwise conv-bn-swish,
squeeze-excite GlobalAveragePool -> 1x1 conv -> swish -> 1x1 conv -> Sigmoid -> Mul, 1x1
projection conv-bn, residual Add when shapes match), swish spelled x * Sigmoid(x) as
exporters emit SiLU. Input [batch, 3, 64, 64], 10 classes."""

from metainfer_core.zoo._builder import GraphBuilder

# (expansion, output channels, kernel, stride)
_BLOCKS = [(1, 16, 3, 1), (4, 24, 3, 2), (4, 24, 3, 1), (4, 40, 5, 2), (4, 80, 3, 2)]


def _squeeze_excite(b: GraphBuilder, x: str, c: int, squeezed: int) -> str:
    s = b.op("GlobalAveragePool", [x])
    s = b.swish(b.conv(s, c, squeezed, 1, bias=True))
    gate = b.op("Sigmoid", [b.conv(s, squeezed, c, 1, bias=True)])
    return b.op("Mul", [x, gate])


def _mbconv(b: GraphBuilder, x: str, cin: int, cout: int, t: int, k: int, stride: int) -> str:
    mid = cin * t
    y = b.conv_bn(x, cin, mid, 1, act=b.swish) if t != 1 else x
    y = b.conv_bn(y, mid, mid, k, stride, group=mid, act=b.swish)
    y = _squeeze_excite(b, y, mid, max(1, cin // 4))
    y = b.conv_bn(y, mid, cout, 1)
    return b.op("Add", [x, y]) if stride == 1 and cin == cout else y


def build(seed: int = 0):
    b = GraphBuilder("efficientnet_tiny", seed)
    x = b.conv_bn(b.input("input", [3, 64, 64]), 3, 16, 3, 2, act=b.swish)
    cin = 16
    for t, cout, k, s in _BLOCKS:
        x = _mbconv(b, x, cin, cout, t, k, s)
        cin = cout
    x = b.conv_bn(x, cin, 256, 1, act=b.swish)
    return b.model({"logits": b.classifier(x, 256, 10)})
