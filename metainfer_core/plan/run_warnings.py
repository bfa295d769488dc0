"""Problems a run would otherwise pass over in silence, as plan.json warnings: a default plan
that does not fit the device, and a predictor far off on the run's own verified plans (the
search ranked the candidates on those predictions)."""
from __future__ import annotations

import math

from metainfer_core.plan.report import human_bytes

PREDICTOR_OFF = 2.0     # measured/predicted beyond this factor either way: the ranking is not to be trusted
PREFIXES = ("memory:", "predictor:")    # how these warnings start (nothing logged them while the run went on)


def default_memory(default_peak: int | None, limit: int, chosen_peak: int | None, measured: bool) -> str | None:
    """When the default plan's peak memory is over the device's limit: say so, and whether the
    chosen plan (None: the default is kept) fits."""
    if not default_peak or not limit or default_peak <= limit:
        return None
    how = "measured" if measured else "predicted"
    kept = ("; the run keeps the default, which does not fit this device" if chosen_peak is None else
            f"; the chosen plan needs {human_bytes(chosen_peak)} and fits" if chosen_peak <= limit else
            f"; the chosen plan needs {human_bytes(chosen_peak)} and does not fit either")
    return (f"memory: the default plan needs {human_bytes(default_peak)} ({how} peak), over the device's "
            f"{human_bytes(limit)} memory limit (target.spec.memory_limit_bytes={limit}){kept}")


def predictor_error(pairs: list[tuple[str, float | None, float | None]]) -> str | None:
    """`pairs`: (plan label, predicted ms, measured ms) of the plans verify measured. A warning
    when any is off by more than PREDICTOR_OFF either way, naming the worst."""
    off = []
    for label, predicted, measured in pairs:
        if predicted and measured and math.isfinite(predicted) and math.isfinite(measured) and predicted > 0:
            factor = max(measured / predicted, predicted / measured)
            if factor > PREDICTOR_OFF:
                off.append((factor, label, predicted, measured))
    if not off:
        return None
    factor, label, predicted, measured = max(off)
    return (f"predictor: off by more than {PREDICTOR_OFF:g}x on {len(off)} of the {len(pairs)} plans verify measured "
            f"(worst: {label} predicted {predicted:.4g} ms, measured {measured:.4g} ms, {factor:.1f}x); the search "
            "ranked plans on these predictions, so a better plan may have been missed: re-profile the target "
            "(flows/reprofile.py) or re-train its predictor (flows/train.py)")
