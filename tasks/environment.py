"""Point Prefect and MLflow at the configured stores (embedded files, or a fleet's servers)
before they are used: Prefect reads PREFECT_HOME at import time, and MLflow falls back to
./mlruns unless told otherwise."""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from metainfer_core.settings import Settings


QUIET = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "PREFECT_LOGGING_TO_API_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "GIT_PYTHON_REFRESH": "quiet",
}


def quiet_prefect() -> None:
    """Call before importing prefect: it configures logging at import time."""
    for key, value in QUIET.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("PREFECT_HOME", os.path.abspath(os.path.join("artifacts", "prefect")))


def configure(s: Settings) -> None:
    Path(s.tracking.prefect_home).mkdir(parents=True, exist_ok=True)
    quiet_prefect()
    os.environ["PREFECT_HOME"] = s.tracking.prefect_home       # per run: tests isolate by artifacts folder
    os.environ["MLFLOW_TRACKING_URI"] = s.tracking.mlflow_uri
    if s.deploy.prefect_api_url:
        use_prefect_api(s.deploy.prefect_api_url)


_API = contextlib.ExitStack()


def use_prefect_api(url: str) -> None:
    """Talk to the Prefect server at `url` from now on, in this process and in the processes it
    starts. The environment variable alone would reach only children: Prefect froze its
    settings when it was imported, so this process also enters a settings context."""
    os.environ["PREFECT_API_URL"] = url
    if "prefect" in sys.modules:
        from prefect.settings import PREFECT_API_URL, temporary_settings

        _API.close()
        _API.enter_context(temporary_settings(updates={PREFECT_API_URL: url}))
