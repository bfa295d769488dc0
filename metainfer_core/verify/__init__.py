"""Verification on the target: `measure` times and checks plans (verify()), `stage` is the
adapt's verify stage around it (accuracy guard, rounds within the budget)."""
from metainfer_core.verify.measure import Verified, verify

__all__ = ["Verified", "verify"]
