"""The one interface every target implements: describe itself, benchmark a single-kernel
model, compile and run a whole model. Measured and modeled backends differ only behind it."""
from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import onnx


@dataclass(frozen=True)
class TargetInfo:
    name: str
    measurement: str                   # "measured" | "modeled"
    firmware: str
    driver: str
    runtime: str
    memory_limit_bytes: int
    supported_ops: tuple[str, ...] | None   # None: every op
    dtypes: tuple[str, ...]
    quantization: tuple[str, ...]
    preferred_layout: str
    static_shapes: bool
    max_fusion_depth: int               # 1: the device launches every node on its own
    extra: dict[str, Any] = field(default_factory=dict)
    # what a model may hold on the target, the yardstick that prices peak memory in the score
    # (search.score.memory_base); 0: the memory limit
    memory_budget_bytes: int = 0

    @property
    def memory_budget(self) -> int:
        return self.memory_budget_bytes or self.memory_limit_bytes

    @property
    def fingerprint_version(self) -> str:
        """`<name>-<10 hex>`: a hash of name, firmware, driver and runtime, so any change to them is a
        new library version. On a measured CPU target the firmware is the host CPU's identity
        (cpu_features: vendor, family, model, model name and the instruction-set extensions that
        change kernel choice), so CPUs sharing a model name but not an ISA keep apart; a modeled
        target's firmware is its spec's."""
        tag = f"{self.name}|{self.firmware}|{self.driver}|{self.runtime}"
        return f"{self.name}-{hashlib.sha1(tag.encode()).hexdigest()[:10]}"

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["fingerprint_version"] = self.fingerprint_version
        return d


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p10_ms: float
    p90_ms: float
    reps: int
    fallback: bool = False             # some part ran on a slower path (host / inserted casts)
    peak_mem_bytes: int = 0

    @staticmethod
    def from_samples(samples_ms: list[float], fallback: bool = False, peak_mem_bytes: int = 0) -> "Timing":
        arr = np.asarray(samples_ms, dtype=np.float64)
        return Timing(float(np.median(arr)), float(np.percentile(arr, 10)), float(np.percentile(arr, 90)),
                      len(samples_ms), fallback, peak_mem_bytes)


class Compiled(ABC):
    """A model prepared for one target. `compile_s` is the time preparing it took."""

    compile_s: float
    compiles_per_shape = False      # True: each input shape is compiled apart (a serving pool per shape)

    @abstractmethod
    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]: ...

    @abstractmethod
    def time_once(self, feeds: dict[str, np.ndarray]) -> float:
        """Latency of one inference in milliseconds."""

    @abstractmethod
    def peak_memory(self, feeds: dict[str, np.ndarray]) -> int:
        """Peak memory of one inference in bytes."""

    def slots(self, n: int, feeds: dict[str, np.ndarray]) -> list:
        """`n` callables (feeds -> outputs) that may run at the same time, one request each
        (serving/pool.py). By default the compiled model itself, which takes concurrent runs;
        a runtime whose runs need a request object each gives `n` of them. `feeds`: an input of
        the shape to serve (a graph compiled per shape is compiled for it first)."""
        return [self.run] * n


class Backend(ABC):
    """Built from a target config: `name`, `measurement` and its `spec` mapping."""

    def __init__(self, name: str, measurement: str, spec: dict[str, Any], seed: int = 0):
        self.name, self.measurement, self.spec, self.seed = name, measurement, dict(spec), seed

    @property
    @abstractmethod
    def info(self) -> TargetInfo: ...

    @abstractmethod
    def compile(self, model: onnx.ModelProto) -> Compiled: ...

    @abstractmethod
    def benchmark(self, model: onnx.ModelProto, reps: int, warmup: int) -> Timing:
        """Time a small (single-kernel) model: warm up, then `reps` timed runs in one go."""
