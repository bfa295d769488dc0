"""Point Prefect and MLflow at the embedded stores before they are imported: Prefect reads
PREFECT_HOME at import time, and MLflow falls back to ./mlruns unless told otherwise."""
from __future__ import annotations

import os
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
