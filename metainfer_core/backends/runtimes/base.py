"""What a runtime on the host declares, so that the host backend, the execution paths, the
peak-memory probe, the deploy loader and the binding action ask it instead of naming it.

A runtime module imports its own package and backend lazily, inside the methods: it is imported
to be registered on hosts where the package is missing (the path is then not offered), and in
the peak-memory probe's process before measuring."""
from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:
    import onnx

    from metainfer_core.backends.base import Backend, Compiled

Feeds = dict[str, np.ndarray]
# (model file, feeds) -> run(feeds): opens one inference session in the peak-memory probe
SessionOpener = Callable[[str, Feeds], Callable[[Feeds], Any]]


class Runtime(ABC):
    """One runtime: its facts as class attributes, its backend, deploy loader and probe session
    as methods. The defaults fit a runtime that computes in the graph's own types."""

    name: str                                  # its key under a target's execution_paths and in plan.json
    packages: tuple[str, ...] = ()             # the python packages it needs (missing: its paths are not offered)
    precisions: tuple[str, ...] = ("f32",)     # the precisions it can be told to compute in
    sets_precision: bool = False               # False: it computes in the graph's types; its label has no precision
    default: bool = False                      # the host's default path: plans nothing binds run on it
    native_int8_forms: tuple[str, ...] = ()    # int8 QDQ placements only it runs in int8: a plan in one binds to it

    def installed(self) -> bool:
        return not self.missing_packages()

    def missing_packages(self) -> list[str]:
        return [p for p in self.packages if importlib.util.find_spec(p) is None]

    def cpu_precisions(self) -> set[str]:
        """The precisions it has a datapath for on this CPU (as the runtime reports it)."""
        return set(self.precisions)

    def serving_options(self, cores: int, concurrency: int, rows: int = 1) -> list[dict[str, Any]]:
        """The settings it offers for `concurrency` requests at once on `cores` cores
        (serving/options.py): by default one session all requests share (one Run() per request,
        at once) and 2, 4, ... up to `concurrency` sessions splitting the cores between them;
        where a call may take `rows` > 1 rows, each of those whose sessions get several requests
        also with them combined into calls (serving/batching.py)."""
        from metainfer_core.serving.options import batched, doublings

        plain = [{"sessions": k, "intra_op_threads": max(1, cores // k)}
                 for k in doublings(concurrency) if k == 1 or k <= cores]
        return plain + [b for s in plain for b in batched(s, concurrency, rows, s["sessions"])]

    @abstractmethod
    def backend(self, path: Any, name: str, measurement: str, spec: dict[str, Any],
                seed: int = 0) -> Backend:
        """The backend running plans bound to `path` (an ExecutionPath); `spec`: the target's settings with the
        path's own (its entry under execution_paths) over them."""

    def load(self, model: onnx.ModelProto, path: Any, settings: dict[str, Any]) -> Compiled:
        """The deploy loader: `model` compiled on `path` with the settings plan.json recorded."""
        return self.backend(path, "deploy", "measured", settings).compile(model)

    @abstractmethod
    def peak_session(self, options: dict[str, Any]) -> SessionOpener:
        """In the peak-memory probe's fresh process: loads the runtime's own code (not counted)
        and returns what opens a session (counted with its first run). `options`: what the
        backend's probe_peak_memory sent."""
