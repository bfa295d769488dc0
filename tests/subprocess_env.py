"""The environment of a flow run as a subprocess: this checkout's packages first (an editable
install may point at another checkout, whose code the test would otherwise run)."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def flow_env(prefect_api: str | None = None, **extra: str) -> dict[str, str]:
    """prefect_api: the URL of a running Prefect server (conftest's prefect_api fixture) for the run
    to use instead of starting its own temporary one; its stage lines then stay on the terminal as
    with the temporary server (set explicitly: an in-process test may have set it in os.environ,
    which the run would inherit)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    server = {"PREFECT_API_URL": prefect_api, "PREFECT_LOGGING_TO_API_ENABLED": "false"} if prefect_api else {}
    return dict(os.environ, PYTHONPATH=path, **{**server, **extra})
