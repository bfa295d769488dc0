"""Why verify and the predictor's training set time warm runs (metainfer_core/backends/timing.py): every
zoo model's default plan and its fp16 and int8 plans, timed side by side in one run three ways:
back to back (one plan alone, the serving case), interleaved with one run per plan per round
(cold: each run follows another plan's), and interleaved with timing.SETTLE untimed runs
before each timed one (what meta-infer measures). Prints the 10th percentile of each and the
ratios to back to back; then how far the cold way misjudges the fp16 and int8 plans against
their default (speed-up cold / speed-up back to back).

    python -m bench.warm_vs_cold [--rounds N] [--models a b ...]
"""
from __future__ import annotations

import sys

import numpy as np

from app.compose import load_settings, zoo_input_shapes
from metainfer_core import zoo
from metainfer_core.backends import backend_for
from metainfer_core.backends.timing import SETTLE, interleaved
from metainfer_core.predictor.dataset.plans import candidate_plans
from metainfer_core.predictor.dataset.training_set import zoo_entries

WANTED = ("default", "fp16(scope=all)", "int8(activation_type=QUInt8,calibrate_method=MinMax,per_channel=auto,"
          "scope=compute,weight_type=QInt8)")


def main(argv: list[str]) -> None:
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 20
    names = argv[argv.index("--models") + 1:] if "--models" in argv else zoo.names()
    s, _ = load_settings(["target=cpu"])
    backend = backend_for(s)
    shapes = zoo_input_shapes(names)
    plans = []
    for e in zoo_entries(shapes, s.seed, 2):
        for p in candidate_plans(e.model, s.action_space.domains(), backend.info, e.feeds, 1, 40):
            if p.label in WANTED:
                plans.append((e.name, p.label.split("(")[0], backend.compile(p.model), e.feeds[0]))
    compiled, feeds = [c for _, _, c, _ in plans], [f for _, _, _, f in plans]
    for c, f in zip(compiled, feeds):
        for _ in range(3):
            c.time_once(f)
    cold = interleaved(compiled, feeds, rounds, settle=0)
    warm = interleaved(compiled, feeds, rounds, settle=SETTLE)
    alone = [[c.time_once(f) for _ in range(rounds)] for c, f in zip(compiled, feeds)]
    p10 = {k: [float(np.percentile(x, 10)) for x in v] for k, v in (("cold", cold), ("warm", warm),
                                                                   ("alone", alone))}
    print(f"{len(plans)} plans, {rounds} rounds each way; 10th percentile ms")
    print("| model | plan | back to back | interleaved cold | cold / b2b | interleaved warm | warm / b2b |")
    print("|---|---|---|---|---|---|---|")
    for i, (model, plan, _, _) in enumerate(plans):
        a, c, w = p10["alone"][i], p10["cold"][i], p10["warm"][i]
        print(f"| {model} | {plan} | {a:.3f} | {c:.3f} | {c / a:.2f}x | {w:.3f} | {w / a:.2f}x |")
    print()
    print("| model | plan | speed-up vs default, back to back | cold | warm |")
    print("|---|---|---|---|---|")
    default = {m: i for i, (m, p, _, _) in enumerate(plans) if p == "default"}
    for i, (model, plan, _, _) in enumerate(plans):
        if plan != "default" and model in default:
            d = default[model]
            sp = {k: v[d] / v[i] for k, v in p10.items()}
            print(f"| {model} | {plan} | {sp['alone']:.2f}x | {sp['cold']:.2f}x | {sp['warm']:.2f}x |")


if __name__ == "__main__":
    main(sys.argv[1:])
