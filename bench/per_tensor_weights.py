"""Why the int8 action's default is per_channel=auto (actions/qdq/params.py weight_axis): every zoo
model quantized (scope=all, uint8 activations, int8 weights) three ways, weight scales per
output channel, per tensor, and auto (per channel only where a weight's channels' ranges
differ by more than AUTO_SPREAD), timed side by side in one run with warm interleaved rounds
(timing.py) on the cpu target. Prints the 10th percentile of each, the ratio of per tensor and
auto to per channel, the accuracy effect of each (1 - cosine similarity to fp32 on the
calibration inputs), and how many weights auto kept per channel.

    python -m bench.per_tensor_weights [--rounds N] [--models a b ...]
"""
from __future__ import annotations

import sys

import numpy as np

from app.compose import load_settings, zoo_input_shapes
from metainfer_core import zoo
from metainfer_core.accuracy.metric import plan_loss, run_cpu
from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.backends import backend_for
from metainfer_core.backends.timing import SETTLE, interleaved
from metainfer_core.predictor.dataset.training_set import zoo_entries

WAYS = {"per channel": True, "per tensor": False, "auto": "auto"}


def main(argv: list[str]) -> None:
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 200
    names = argv[argv.index("--models") + 1:] if "--models" in argv else zoo.names()
    s, _ = load_settings(["target=cpu"])
    backend = backend_for(s)
    shapes = zoo_input_shapes(names)
    action = ACTIONS["int8"]
    print("| model | per channel ms | per tensor ms | auto ms | per tensor / per channel | auto / per channel "
          "| loss per channel / per tensor / auto | weights per channel under auto |")
    print("|---|---|---|---|---|---|---|---|")
    for e in zoo_entries(shapes, s.seed, 2):
        ctx = ActionContext(target=backend.info, calibration_feeds=e.feeds)
        reference = run_cpu(e.model, e.feeds)
        models, losses = [], []
        for per_channel in WAYS.values():
            params = dict(scope="all", activation_type="QUInt8", weight_type="QInt8", per_channel=per_channel,
                          calibrate_method="MinMax")
            out = action.apply(e.model, action.sites(e.model, params, backend.info)[0], params, ctx)
            models.append(out)
            losses.append(plan_loss(reference, run_cpu(out, e.feeds)))
        compiled = [backend.compile(m) for m in models]
        p10 = [float(np.quantile(t, 0.1)) for t in interleaved(compiled, [e.feeds[0]] * 3, rounds, SETTLE)]
        inits = {i.name: i for i in models[2].graph.initializer}
        dq = [n for n in models[2].graph.node if n.op_type == "DequantizeLinear" and n.input[0].endswith("|int8")
              and n.input[0] in inits]
        kept = sum(int(np.prod(inits[n.input[1]].dims)) > 1 for n in dq)
        print(f"| {e.name} | {p10[0]:.4f} | {p10[1]:.4f} | {p10[2]:.4f} | {p10[1] / p10[0]:.2f} | {p10[2] / p10[0]:.2f} "
              f"| {losses[0]:.1e} / {losses[1]:.1e} / {losses[2]:.1e} | {kept} of {len(dq)} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
