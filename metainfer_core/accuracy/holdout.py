"""Held-out accuracy: the samples that calibrate a plan never judge it.

int8 calibration, the per-node sensitivity estimates, the accuracy guard and the search's exact
checks fit a plan to the calibration samples; the loss that the accuracy bound judges is measured
on held-out samples that none of them saw (a plan can pass the bound on the samples it was
fitted to and miss it on the next ones). The split is fixed and stated: every HOLD_OUT_EVERY-th
sample of data.inputs (the 3rd, 6th, ...) is held out, the rest calibrate; data.validation=<npz>
holds the judging samples apart instead. With fewer than MIN_TO_SPLIT samples there is nothing
to spare: all samples do both, and the run's warnings say so."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from metainfer_core.accuracy.metric import LossFn, plan_loss

HOLD_OUT_EVERY = 3
MIN_TO_SPLIT = 4

Feeds = list[dict[str, np.ndarray]]


@dataclass
class SampleSet:
    """Inputs, the fp32 reference outputs on them, and the loss bound to their labels if any."""
    feeds: Feeds
    reference: list[list[np.ndarray]] = field(default_factory=list)
    loss_fn: LossFn = plan_loss


def held_out_indices(n: int) -> list[int]:
    """The samples that judge accuracy among n (none: too few to split)."""
    if n < MIN_TO_SPLIT:
        return []
    return [i for i in range(n) if i % HOLD_OUT_EVERY == HOLD_OUT_EVERY - 1]


def split(feeds: Feeds, labels: np.ndarray | None) -> tuple[tuple[Feeds, np.ndarray | None],
                                                            tuple[Feeds, np.ndarray | None] | None]:
    """((calibration feeds, labels), (held-out feeds, labels) or None when too few to split)."""
    held = set(held_out_indices(len(feeds)))
    if not held:
        return (feeds, labels), None
    keep = [i for i in range(len(feeds)) if i not in held]
    out = sorted(held)
    pick = (lambda idx: labels[idx] if labels is not None else None)
    return ([feeds[i] for i in keep], pick(keep)), ([feeds[i] for i in out], pick(out))


def too_few_note(n: int) -> str:
    return (f"only {n} validation sample(s): accuracy is judged on the samples that also calibrated the plans "
            f"(at least {MIN_TO_SPLIT} are needed to hold every {HOLD_OUT_EVERY}rd out; or give "
            "data.validation=<file.npz>)")
