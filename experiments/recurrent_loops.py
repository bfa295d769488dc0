"""What the recurrent action gains: a Keras-style stacked LSTM written as `Loop`s (the way tf2onnx
exports it) against the same model after the action (ONNX's LSTM operators), on the `cpu` target's
ONNX Runtime (one thread), timed interleaved in one process. Issue 50's case is the default: two
layers, 59 inputs, 300 hidden, 12 steps, batch 1, the last layer returning its last step.

    python -m experiments.recurrent_loops [--cell lstm] [--layers 2] [--features 59] [--hidden 300]
                                          [--steps 12] [--batch 1] [--rounds 40] [--normalize]

Prints each graph's median and p10/p90 (ms), the ratio, and the largest absolute difference of
the outputs (fp32 reassociation only). --normalize runs meta-infer's normalize first, as adapt does.
"""

from __future__ import annotations

import argparse

import numpy as np

from app.compose import target_backend
from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.zoo.keras_rnn import keras_rnn
from metainfer_core.backends.timing import SETTLE, interleaved, warm_up
from metainfer_core.normalize import normalize


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cell", default="lstm", choices=("lstm", "gru", "rnn"))
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--features", type=int, default=59)
    ap.add_argument("--hidden", type=int, default=300)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--normalize", action="store_true")
    ap.add_argument("--tf2onnx", action="store_true", help="the loop as tf2onnx writes it (counter, while condition)")
    args = ap.parse_args()

    backend = target_backend("cpu")
    tf2onnx = {"counter": True, "cond": "tf2onnx", "carried_weights": True} if args.tf2onnx else {}
    loops = keras_rnn(args.cell, features=args.features, hidden=args.hidden, layers=args.layers,
                      return_sequences=False, scale=0.1, **tf2onnx)
    if args.normalize:
        loops = normalize(loops, {"x": [args.batch, args.steps, args.features]}).model
    action = ACTIONS["recurrent"]
    fused = loops
    while sites := action.sites(fused, {}, backend.info):     # every layer's loop
        assert action.legal(fused, sites[0], {}, backend.info) is None, action.legal(fused, sites[0], {}, backend.info)
        fused = action.apply(fused, sites[0], {}, ActionContext(target=backend.info))

    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((args.batch, args.steps, args.features)).astype(np.float32)}
    graphs = {"Loop bodies": loops, f"ONNX {args.cell.upper()}": fused}
    compiled = [backend.compile(m) for m in graphs.values()]
    outputs = [c.run(feeds) for c in compiled]
    err = max(float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in zip(*outputs))
    for c in compiled:
        warm_up(c, feeds)
    samples = interleaved(compiled, [feeds] * len(compiled), args.rounds, SETTLE)
    print(f"{args.layers}-layer {args.cell.upper()}, {args.features} inputs, {args.hidden} hidden, {args.steps} steps, "
          f"batch {args.batch}; cpu target (ONNX Runtime, {backend.spec['intra_op_threads']} thread), "
          f"{args.rounds} interleaved rounds")
    medians = []
    for name, s in zip(graphs, samples):
        medians.append(float(np.median(s)))
        print(f"  {name:12s} median {medians[-1]:7.3f} ms  p10 {np.percentile(s, 10):7.3f}  p90 {np.percentile(s, 90):7.3f}")
    print(f"  ratio {medians[0] / medians[1]:.2f}x   max |difference| {err:.2e}")


if __name__ == "__main__":
    main()
