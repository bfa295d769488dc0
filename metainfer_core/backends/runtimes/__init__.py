"""Runtimes on the host, each declared in one module of this package (`base.Runtime`,
registered with `registry.register`); the engine asks the registry, never a runtime by name.
Adding one: a module here and its key under a target's `execution_paths`
(docs/execution-paths.md, "Adding a runtime")."""
from __future__ import annotations

from metainfer_core.backends.runtimes.base import Runtime
from metainfer_core.backends.runtimes.registry import (default_runtime, find, precisions, register, runtime_for_form,
                                                       runtime_names, runtime_of, runtimes, unregister)

__all__ = ["Runtime", "default_runtime", "find", "precisions", "register", "runtime_for_form", "runtime_names",
           "runtime_of", "runtimes", "unregister"]
