"""The action space: every graph rewrite the search may apply, keyed by its config name.

The eight action classes of the design (SPEC.md section 2): Conv+BN fusion (conv_bn_fusion),
adjacent convolution merge (conv_merge), transpose cancellation (transpose_cancel), data
layout (layout), kernel fusion (fuse_chain), low-precision substitution (fp16, bf16, int8, int8_dynamic),
subgraph splitting (tiling), memory reuse (memory_reuse) and compute/copy overlap scheduling
(schedule), and execution-path binding (binding: which runtime runs the plan, in which
precision). Operator binding on a modeled device (device or host per kernel) is computed for every
candidate by metainfer_core.ir.kernels.bind; an action that would add an op the device lacks is illegal."""
import importlib
import inspect
import pkgutil

from metainfer_core.actions.base import Action, ActionContext, Param, Site, Step


def _discovered() -> dict[str, Action]:
    """Every concrete Action subclass with a name in this package's modules: an action registers
    by existing (one module, its test beside it); nothing else lists it."""
    for module in pkgutil.iter_modules(__path__):
        if module.name.startswith("_"):
            continue
        importlib.import_module(f"{__name__}.{module.name}")
    found: dict[str, Action] = {}
    todo = list(Action.__subclasses__())
    while todo:
        cls = todo.pop(0)
        todo.extend(cls.__subclasses__())
        if not inspect.isabstract(cls) and getattr(cls, "name", None) and cls.__module__.startswith(f"{__name__}."):
            if cls.name in found:
                raise TypeError(f"two actions are named {cls.name!r}: {type(found[cls.name]).__qualname__} and {cls.__qualname__}")
            found[cls.name] = cls()
    return dict(sorted(found.items()))


ACTIONS: dict[str, Action] = _discovered()


def expand(model, space: dict, target, after: Step | None = None, illegal: dict[str, str] | None = None,
           lossy: bool | None = None, cache: dict | None = None, narrow: bool = True, calibrating: bool = True):
    """The action space's one enumerator, used by profile, search and predictor training alike:
    every legal (action, parameter choice, site) of `model` under `space` ({action: domain}).
    after: the step that made `model`; plan-wide directives commute with graph rewrites, so after
    a directive only directives later in name order follow (each combination is reached once).
    illegal: collects action -> its last refusal. lossy: only lossy (True) or lossless (False) actions.
    cache: the run's shared action cache, which may narrow sites (Action.narrow: int8's float layers);
    narrow=False leaves that to the caller (the search narrows an expansion only when its budget
    reaches it: narrowing may measure). calibrating=False leaves out the choices whose apply runs
    the graph (Action.calibrates: an outside quantizer, seconds per graph): profiling and the
    predictor's training set measure kernels, and those are another choice's (int8's own form)."""
    last_keeps = after is not None and ACTIONS[after.kind].keeps_graph(dict(after.params))
    for name, domain in space.items():
        action = ACTIONS[name]
        if lossy is not None and action.lossy != lossy:
            continue
        for params in action.choices(domain):
            if not calibrating and action.calibrates(params):
                continue
            if last_keeps and (not action.keeps_graph(params) or name <= after.kind):
                continue
            for site in action.sites(model, params, target):
                if narrow:
                    site = action.narrow(site, params, cache)
                    if site is None:
                        continue
                reason = action.legal(model, site, params, target)
                if reason:
                    if illegal is not None:
                        illegal[name] = reason
                    continue
                yield action, params, site


__all__ = ["ACTIONS", "Action", "ActionContext", "Param", "Site", "Step", "expand"]
