"""What a plan's numerics cost: the loss metric against the fp32 reference (metric), per-node
sensitivity that estimates a low-precision plan's loss without running it (sensitivity), and the
guard that pins the layers letting in the most error back to fp32 (guard). Each reads the
graph's values through ir/runs.py."""
