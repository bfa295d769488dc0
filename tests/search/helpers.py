"""What the search's test files share that is not a fixture: the action spaces, twin predictors
whose numbers are known, and `search()`, a beam search on a fake clock. The fixtures `models`
and `predictors` (tests/search/conftest.py) hand out what `zoo_models()` and `trained()` build
once per process."""
from __future__ import annotations

import functools
from pathlib import Path

from metainfer_core.accuracy.metric import run_cpu
from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.fingerprint.profiler import profile
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.normalize import normalize
from metainfer_core.predictor import CostModel
from metainfer_core.search import Evaluator, beam_search
from metainfer_core.zoo import build

from search.fakes import FakeClock
from twins import BALANCED, FakeCostModel, backend

INT8 = {"scope": ["compute", "all"], "activation_type": ["QUInt8"], "weight_type": ["QInt8"], "per_channel": [True],
        "calibrate_method": ["MinMax"], "engine": ["metainfer"]}
SPACE = {"conv_merge": {}, "layout": {}, "fuse_chain": {"max_depth": [2, 4]}, "fp16": {}, "bf16": {}, "int8": INT8,
         "tiling": {"tiles": [2, 4], "axis": ["height"]}, "memory_reuse": {}, "schedule": {}}
LOSSY = {n for n, a in ACTIONS.items() if a.lossy}

INT8_FAST, INT8_SLOW = {"int8": 0.3, "uint8": 0.3}, {"int8": 10.0, "uint8": 10.0}
# An anchored prediction against one later timing of a sub-millisecond graph: two compiles of the
# same int8 graph on OpenVINO time up to ~2x apart here, so "anchored" is within 3x (unanchored: 10x).
ANCHORED = 3.0
ONE_INT8 = {**INT8, "scope": ["compute"], "placement": ["inputs_outputs"]}


@functools.cache
def zoo_models() -> dict:
    """name -> (normalized model, two random feeds, its outputs on them): built once per process."""
    out = {}
    for name in ("resnet_tiny", "mobilenet_v2_tiny"):
        m = normalize(build(name), None).model
        feeds = [random_feeds(m, seed=i) for i in range(2)]
        out[name] = (m, feeds, run_cpu(m, feeds))
    return out


_TRAINED: dict[tuple[str, str], CostModel] = {}


def trained(folder: Path, target: str, name: str) -> CostModel:
    """A CostModel for (target, model), trained on the model and its one-action variants (about a
    second each): once per process, its fingerprint library under `folder`."""
    if (target, name) not in _TRAINED:
        lib = FingerprintLibrary(f"sqlite:///{folder}/fp.db")
        m, feeds, _ = zoo_models()[name]
        be = backend(target)
        ctx = ActionContext(target=be.info, calibration_feeds=feeds)
        variants = [m]
        for action, domain in SPACE.items():
            for params in ACTIONS[action].choices(domain):
                for site in ACTIONS[action].sites(m, params, be.info):
                    if ACTIONS[action].legal(m, site, params, be.info) is None:
                        variants.append(ACTIONS[action].apply(m, site, params, ctx))
        rep = profile(be, lib, variants, [1], reps=3, warmup=0)
        _TRAINED[(target, name)] = CostModel.train(lib.records(rep.fingerprint_version), rep.fingerprint_version)
    return _TRAINED[(target, name)]


def search(models, predictors, target, name="resnet_tiny", weights=BALANCED, max_loss=0.01, depth=2, beam=3,
           space=SPACE, cost_model=None, **spec):
    """A beam search of `name` on `target` (spec entries overridden) on a fake clock: its budget
    (120 s) never ends, whatever the machine's load; the result's progress_levels: the levels
    its progress reported, in order."""
    m, feeds, reference = models[name]
    be = backend(target, **spec)
    ctx = ActionContext(target=be.info, calibration_feeds=feeds)
    cm = cost_model or predictors(target, name)
    clock = FakeClock()
    ev = Evaluator(cm, be.info, weights, max_loss, feeds, reference, LOSSY, ctx=ctx, max_probes=12, clock=clock)
    levels = []
    res = beam_search(m, space, ev, ctx, beam_width=beam, depth=depth, top_k=3, time_budget_s=120,
                      progress=lambda lvl, n, best: levels.append(lvl), clock=clock)
    res.progress_levels = levels
    return res


class Priced(FakeCostModel):
    """A twin predictor on which kernels of some precisions run so many times the float32 time."""
    def __init__(self, **factors):
        self.factors = factors

    def predict_kernels_ms(self, kernels):
        return super().predict_kernels_ms(kernels) * [self.factors.get(k.dtype, 1.0) for k in kernels]


def searched(models, cost_model, space):
    """A one-level search of resnet_tiny on the host (its budget on a fake clock): (result, evaluator)."""
    m, feeds, reference = models["resnet_tiny"]
    be = backend("cpu")
    clock = FakeClock()
    ev = Evaluator(cost_model, be.info, BALANCED, 0.01, feeds, reference, LOSSY, clock=clock)
    res = beam_search(m, space, ev, ActionContext(target=be.info, calibration_feeds=feeds), beam_width=3, depth=1,
                      top_k=3, time_budget_s=120, clock=clock)
    return res, ev
