"""Built-in model zoo: small ONNX models generated in code with seeded weights (no downloads),
each imitating a common architecture, for tests, benchmarks and demos. Beside them, full-size
reference networks (`REFERENCE`: published vendor latencies, a large model for the time budget):
`build` makes them too, but they are not among `names()`, the models the flows, onboarding and
training iterate."""

from collections.abc import Callable

import onnx

from metainfer_core.errors import MetaInferError
from metainfer_core.zoo import (bert_tiny, efficientnet_tiny, mlp, mobilenet_v2, mobilenet_v2_tiny,
                                resnet_tiny, unet_nhwc_512, unet_tiny, vit_tiny)

BUILDERS: dict[str, Callable[[int], onnx.ModelProto]] = {
    "resnet_tiny": resnet_tiny.build,
    "mobilenet_v2_tiny": mobilenet_v2_tiny.build,
    "efficientnet_tiny": efficientnet_tiny.build,
    "unet_tiny": unet_tiny.build,
    "bert_tiny": bert_tiny.build,
    "vit_tiny": vit_tiny.build,
    "mlp": mlp.build,
}
REFERENCE: dict[str, Callable[[int], onnx.ModelProto]] = {
    "mobilenet_v2": mobilenet_v2.build,
    "unet_nhwc_512": unet_nhwc_512.build,
}


def names() -> list[str]:
    return list(BUILDERS)


def build(name: str, seed: int = 0) -> onnx.ModelProto:
    """Build zoo model `name` with weights drawn from `seed`."""
    if name in REFERENCE:
        return REFERENCE[name](seed)
    if name not in BUILDERS:
        raise MetaInferError(
            f"Unknown zoo model {name!r}. The built-in zoo has: {', '.join(BUILDERS)}. "
            "Pick one of these names, or give your own ONNX file with model=file "
            "model.path=<file.onnx>.")
    return BUILDERS[name](seed)
