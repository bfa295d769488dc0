"""Execution-path binding (lossless on `f32`, lossy below): which runtime runs the plan, with
the precision that runtime computes in. Records the choice in the model's metadata
(`metainfer.execution_path`); the host backend compiles the plan on that path, so verify
times it there. The graph is untouched, so it stacks with every rewrite: an int8 plan may stay
on the default runtime (unbound) while an fp32 graph binds to another runtime in bf16.

Legal only where the target offers the path (conf/target/<name>.yaml `execution_paths`, its
package installed, the CPU reporting the datapath). Whole-graph binding: every runtime the
registry declares (backends/runtimes/) runs every op of an ONNX graph on this host."""
from __future__ import annotations

from metainfer_core.actions.base import Action, Param, Site
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.backends.runtimes import default_runtime, precisions, runtime_names, runtime_of
from metainfer_core.ir.graph_utils import clone


def offered(target) -> list[str]:
    return list(target.extra.get("execution_paths") or []) if target is not None else []


def _first_other() -> str:
    """The default `runtime` parameter: the first runtime beside the default (binding to the
    default path changes nothing)."""
    names = runtime_names()
    return next((n for n in names if n != default_runtime().name), names[0])


class Binding(Action):
    name = "binding"
    summary = ("the execution path that runs the whole plan (model metadata); legal where the target offers the "
               "path; stacks with every rewrite (an int8 graph on one runtime, an fp32 graph on another in bf16); "
               "lossy below f32")
    binds_path = True
    params = {"runtime": Param(_first_other(), runtime_names(), "the runtime that runs the whole graph"),
              "precision": Param("f32", precisions(), "the precision it computes in (the runtime's precision "
                                                      "setting; a runtime without one computes in the graph's types)")}

    def words(self, params, scope=""):
        return (f"{params.get('runtime')} {params.get('precision')}",
                f"run the whole graph on {params.get('runtime')}, computing in {params.get('precision')}")

    @staticmethod
    def path(params) -> ExecutionPath:
        return ExecutionPath(params["runtime"], params["precision"])

    def sites(self, model, params, target):
        path = self.path(params)
        if not runtime_of(path.runtime).sets_precision and path.precision != "f32":
            return []           # a runtime without a precision setting computes in the graph's types
        if path == ExecutionPath.of(model):
            return []
        return [Site((), path.label)]

    def legal(self, model, site, params, target):
        path = self.path(params)
        if path.label not in offered(target):
            return (f"target {target.name} does not offer execution path {path.label} "
                    f"(offered: {offered(target) or 'its default only'})")
        return None

    def keeps_graph(self, params):
        return True

    def apply(self, model, site, params, ctx):
        out = clone(model)
        self.path(params).write_to(out)
        return out
