"""Inputs too large to hold: refused before any array is drawn. A shape bound by mistake
(model.input_shapes={x:[100000000000,16]}) would otherwise end deep in the run with a MemoryError."""
from __future__ import annotations

import os
from pathlib import Path

import onnx

from metainfer_core.errors import MetaInferError
from metainfer_core.ir.tensors import input_feeds_spec


def host_memory_bytes() -> int:
    """This host's memory, or the container's limit when lower (cgroup v2, then v1)."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def check_input_memory(model: onnx.ModelProto, memory_bytes: int | None = None) -> None:
    """Raise when one sample of the model's inputs (shapes bound; an unbound dim counts as 1)
    takes more than half of `memory_bytes` (default: the host's): a run holds its inputs and at
    least one activation of their order (the reference run, then the plan's), so it cannot fit."""
    memory = memory_bytes if memory_bytes is not None else host_memory_bytes()
    try:
        spec = input_feeds_spec(model)
    except ValueError:
        return  # an input without a shape: the completeness check names it
    sizes = {name: info.dtype.itemsize * _product(info.shape) for name, info in spec.items()}
    total = sum(sizes.values())
    if total * 2 <= memory:
        return
    name = max(sizes, key=sizes.get)  # type: ignore[arg-type]
    info = spec[name]
    raise MetaInferError(
        f"Input '{name}' of shape {list(info.shape)} ({info.dtype}) takes {sizes[name]:,} bytes "
        f"({_human(sizes[name])}) per sample{f', all inputs {total:,} bytes' if len(sizes) > 1 else ''}; "
        f"this host has {memory:,} bytes ({_human(memory)}) of memory and a run needs at least twice its "
        "inputs, so nothing was run. Bind the deployment size in model.input_shapes (e.g. a batch of 1), "
        "or use a host with more memory."
    )


def _product(shape: tuple[int, ...]) -> int:
    out = 1
    for d in shape:
        out *= int(d)
    return out


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if size < 1024 or unit == "PiB":
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} PiB"
