"""ResNet-18-like CNN: conv-bn-relu stem and max-pool, four stages of two basic residual
blocks (16/32/64/128 channels, strided blocks project with a 1x1 conv-bn), then the
GlobalAveragePool/Flatten/Gemm head. Input [batch, 3, 64, 64], 10 classes."""

from metainfer_core.zoo._builder import GraphBuilder


def _basic_block(b: GraphBuilder, x: str, cin: int, cout: int, stride: int) -> str:
    y = b.conv_bn(x, cin, cout, 3, stride, act=b.relu)
    # A damped last BN keeps the residual sum from growing block after block.
    y = b.conv_bn(y, cout, cout, 3, bn_scale=0.25)
    shortcut = b.conv_bn(x, cin, cout, 1, stride) if stride != 1 or cin != cout else x
    return b.relu(b.op("Add", [y, shortcut]))


def build(seed: int = 0):
    b = GraphBuilder("resnet_tiny", seed)
    x = b.conv_bn(b.input("input", [3, 64, 64]), 3, 16, 7, 2, act=b.relu)
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 16
    for i, cout in enumerate([16, 32, 64, 128]):
        x = _basic_block(b, x, cin, cout, 1 if i == 0 else 2)
        x = _basic_block(b, x, cout, cout, 1)
        cin = cout
    # The pooled ReLU features carry a large mean; a low head gain keeps logits of order one.
    return b.model({"logits": b.classifier(x, cin, 10, gain=0.25)})
