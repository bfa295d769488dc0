"""Typed schemas of `target.spec`, one per built-in backend class, checked with the settings
before any work starts: a negative throughput, a zero bandwidth, an unknown dtype or op name, or
a number given as text would otherwise run and yield plausible, wrong latencies. A backend class
outside this table (a user's own) checks its spec itself."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Positive = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(gt=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]
DTYPES = ("float32", "float16", "bfloat16", "int8")
Dtype = Literal["float32", "float16", "bfloat16", "int8"]


def _onnx_ops(ops: list[str] | None, what: str) -> list[str] | None:
    import onnx.defs   # late: only when a spec names ops

    if ops is None:
        return None
    unknown = [op for op in ops if not onnx.defs.has(op)]
    if unknown:
        raise ValueError(f"{unknown} are not ONNX op names ({what} lists ops as ONNX spells them, e.g. Conv, MatMul)")
    return ops


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)


class SimulatedSpec(_Spec):
    """conf/target/{gpu,npu,fpga,asic}.yaml (metainfer_core.backends.simulator)."""
    firmware: str
    driver: str
    peak_gflops: dict[Dtype, Positive] = Field(min_length=1)
    op_efficiency: dict[str, Fraction] = Field(default_factory=dict)
    sram_bytes: PositiveInt
    sram_gbps: Positive
    dram_gbps: Positive
    weight_gbps: Positive | None = None
    memory_limit_bytes: PositiveInt
    memory_budget_bytes: PositiveInt | None = None   # default: the on-chip memory (sram), within the limit
    weights_streamed: bool = False
    memory_strategy: Literal["none", "greedy", "first_fit"] = "greedy"
    launch_overhead_us: Annotated[float, Field(ge=0)]
    max_fusion_depth: PositiveInt = 1
    fuse_layers: bool = False
    channel_align: PositiveInt = 1
    supported_ops: list[str] | None = None
    host_gflops: Positive
    host_gbps: Positive
    link_gbps: Positive
    static_shapes: bool = False
    preferred_layout: Literal["NCHW", "NHWC"] = "NCHW"
    layout_penalty: Fraction = 1.0
    quantization: list[Literal["QDQ", "dynamic"]] = Field(default_factory=list)
    noise: Annotated[float, Field(ge=0, le=1)] = 0.0
    op_slowdown: dict[str, Positive] = Field(default_factory=dict)

    @field_validator("supported_ops")
    @classmethod
    def _known_ops(cls, ops):
        return _onnx_ops(ops, "supported_ops")

    @field_validator("op_efficiency", "op_slowdown")
    @classmethod
    def _known_op_keys(cls, table):
        _onnx_ops([op for op in table if op != "default"], "this mapping")
        return table


class HostSpec(_Spec):
    """conf/target/cpu.yaml (metainfer_core.backends.host); other keys are the runtime's own."""
    model_config = ConfigDict(extra="allow")
    memory_limit_bytes: PositiveInt
    memory_budget_bytes: PositiveInt | None = None   # default: the memory limit
    intra_op_threads: PositiveInt | None = None
    dtypes: list[Dtype] = Field(default_factory=lambda: ["float32"])
    quantization: list[Literal["QDQ", "dynamic"]] = Field(default_factory=list)
    preferred_layout: Literal["NCHW", "NHWC"] = "NCHW"
    static_shapes: bool = False


SCHEMAS: dict[str, type[_Spec]] = {
    "metainfer_core.backends.simulator.SimulatedBackend": SimulatedSpec,
    "metainfer_core.backends.host.HostBackend": HostSpec,
}


def check_spec(backend: str, spec: Any) -> None:
    """Raise pydantic's ValidationError where `spec` breaks its backend's schema."""
    schema = SCHEMAS.get(backend)
    if schema is not None:
        schema.model_validate(spec)
