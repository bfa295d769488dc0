"""The one registry of host runtimes. A runtime registers itself (`@register`) when its module
is imported, and the first question imports every module of this package, so adding a runtime
edits nothing here."""
from __future__ import annotations

import importlib
import pkgutil
import threading
from typing import TYPE_CHECKING

from metainfer_core.errors import MetaInferError

if TYPE_CHECKING:
    from metainfer_core.backends.runtimes.base import Runtime

_FRAMEWORK = ("base", "registry")       # this package's modules that declare no runtime
_RUNTIMES: dict[str, Runtime] = {}
_ordered: tuple[Runtime, ...] | None = None   # runtimes() once computed: paths ask it for every default-path test
_lock = threading.RLock()               # path costs are measured from worker threads
_discovered = False


def register(cls: type[Runtime]) -> type[Runtime]:
    """Class decorator: one instance of `cls` answers for its `name` from now on."""
    global _ordered
    runtime = cls()
    known = _RUNTIMES.get(runtime.name)
    if known is not None and _where(type(known)) != _where(cls):
        raise ValueError(f"runtime {runtime.name!r} is declared twice: {_where(type(known))} and {_where(cls)}")
    _RUNTIMES[runtime.name] = runtime
    _ordered = None
    return cls


def unregister(name: str) -> None:
    global _ordered
    _RUNTIMES.pop(name, None)
    _ordered = None


def _where(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    with _lock:
        if _discovered:
            return
        package = importlib.import_module(__package__)
        for module in pkgutil.iter_modules(package.__path__):
            if module.name not in _FRAMEWORK and not module.name.startswith("_"):
                importlib.import_module(f"{__package__}.{module.name}")
        _discovered = True


def find(name: str) -> Runtime | None:
    _discover()
    return _RUNTIMES.get(name)


def runtime_of(name: str) -> Runtime:
    runtime = find(name)
    if runtime is None:
        raise MetaInferError(f"No runtime named {name!r} is declared (declared: {list(runtime_names())}). A runtime "
                             "is one module in metainfer_core/backends/runtimes/ (docs/execution-paths.md).")
    return runtime


def runtimes() -> tuple[Runtime, ...]:
    """Every declared runtime, the default first, then by name."""
    global _ordered
    _discover()
    if _ordered is None:
        _ordered = tuple(sorted(_RUNTIMES.values(), key=lambda r: (not r.default, r.name)))
    return _ordered


def runtime_names() -> tuple[str, ...]:
    return tuple(r.name for r in runtimes())


def default_runtime() -> Runtime:
    defaults = [r for r in runtimes() if r.default]
    if len(defaults) != 1:
        raise MetaInferError(f"Exactly one runtime must declare itself the host's default; "
                             f"{[r.name for r in defaults] or 'none'} do.")
    return defaults[0]


def precisions() -> tuple[str, ...]:
    """Every precision some runtime can be told to compute in, in runtimes() order."""
    return tuple(dict.fromkeys(p for r in runtimes() for p in r.precisions))


def runtime_for_form(form: str) -> Runtime | None:
    """The runtime that alone runs the int8 form `form` (a QDQ placement) in int8, if any."""
    return next((r for r in runtimes() if form in r.native_int8_forms), None)
