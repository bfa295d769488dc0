"""Target backends. `create_backend` builds the class a target config names with `_target_`."""
from __future__ import annotations

import importlib
from typing import Any

from metainfer_core.backends.base import Backend, Compiled, TargetInfo, Timing
from metainfer_core.errors import MetaInferError

__all__ = ["Backend", "Compiled", "TargetInfo", "Timing", "backend_for", "create_backend"]


def create_backend(backend_path: str, name: str, measurement: str, spec: dict[str, Any], seed: int = 0) -> Backend:
    module_name, _, cls_name = backend_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise MetaInferError(f"Target {name!r} names backend class {backend_path!r}, which cannot be imported ({exc}). "
                             f"Fix `_target_` in conf/target/{name}.yaml.") from None
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise MetaInferError(f"Target {name!r}: {backend_path} is not a metainfer_core Backend subclass.")
    return cls(name=name, measurement=measurement, spec=spec, seed=seed)


def backend_for(s) -> Backend:
    """The backend of the configured target (metainfer_core.settings.Settings)."""
    return create_backend(s.target.backend, s.target.name, s.target.measurement, s.target.spec, seed=s.seed)
