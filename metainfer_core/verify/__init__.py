"""Verification on the target: `measure` times and checks plans (verify()), `stage` is the
adapt's verify stage around it (accuracy guard, rounds within the budget), `mailbox` carries a
verify request to the host that has the device and its measurements back (deploy.remote_verify)."""
from metainfer_core.verify.measure import Verified, verify

__all__ = ["Verified", "verify"]
