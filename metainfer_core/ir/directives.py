"""Plan directives: what the actions leave in a model's metadata_props for devices, the
simulator and the cost model (ONNX runtimes ignore them). Every `metainfer.*` key is named here,
with the functions that read and write them; the meaning of a value stays with its user."""
from __future__ import annotations

import onnx

PREFIX = "metainfer."

# node metadata
FUSION_KEY = "metainfer.fusion_group"   # a tag shared by the nodes `fuse_chain` made one kernel
LAYOUT_KEY = "metainfer.layout"         # "NHWC" on a node computing channels-last; "adapter" on its Transposes
PRECISION_KEY = "metainfer.precision"   # "bfloat16" on the Casts that hold a tensor in emulated bf16
BIND_KEY = "metainfer.bind"             # "host": pinned to the host whatever the device supports

# model metadata (plan-wide)
DOUBLE_BUFFER_KEY = "metainfer.double_buffer"   # "1": host<->device transfers use two staging buffers
SCHEDULE_KEY = "metainfer.schedule"             # "memory": the node order is the memory-aware schedule
STRATEGY_KEY = "metainfer.memory_strategy"      # the activation memory policy (memory.STRATEGIES)
PATH_KEY = "metainfer.execution_path"           # JSON of the ExecutionPath (runtime, precision)
INT8_ENGINE_KEY = "metainfer.int8_engine"       # "nncf": NNCF wrote the graph's Q/DQ (else meta-infer did)

ADAPTER = "adapter"  # LAYOUT_KEY's value on a layout adapter Transpose


def node_meta(node: onnx.NodeProto, key: str) -> str | None:
    return _get(node.metadata_props, key)


def set_node_meta(node: onnx.NodeProto, key: str, value: str) -> None:
    _set(node.metadata_props, key, value)


def model_meta(model: onnx.ModelProto, key: str) -> str | None:
    return _get(model.metadata_props, key)


def set_model_meta(model: onnx.ModelProto, key: str, value: str) -> None:
    _set(model.metadata_props, key, value)


def plan_meta(model: onnx.ModelProto) -> dict[str, str]:
    """Every plan-wide directive the model holds (model metadata under PREFIX)."""
    return {p.key: p.value for p in model.metadata_props if p.key.startswith(PREFIX)}


def double_buffered(model: onnx.ModelProto) -> bool:
    return any(p.key == DOUBLE_BUFFER_KEY and p.value == "1" for p in model.metadata_props)


def _get(props, key: str) -> str | None:  # type: ignore[no-untyped-def]
    return next((p.value for p in props if p.key == key), None)


def _set(props, key: str, value: str) -> None:  # type: ignore[no-untyped-def]
    """Overwrite the first entry of `key`, else add one (never a second entry)."""
    for p in props:
        if p.key == key:
            p.value = value
            return
    props.add(key=key, value=value)
