"""Point Prefect and MLflow at the configured stores (embedded files, or a fleet's servers)
before they are used: Prefect reads PREFECT_HOME (its database, profiles, result storage) at
import time, so the flows call quiet_prefect() first, which composes the command line's settings
to find it (tracking.prefect_home, under paths.artifacts, relative paths against the directory
the user ran from); MLflow falls back to ./mlruns unless told otherwise."""
from __future__ import annotations

import atexit
import contextlib
import gc
import os
import sys
import warnings
from pathlib import Path

from app.settings import RunSettings


QUIET = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",                    # Prefect's client-side usage events (and its first-run notice)
    "PREFECT_LOGGING_LEVEL": "WARNING",
    # the stage lines reach the flow-run page of a Prefect server named by PREFECT_API_URL (app/
    # progress.py); not with the temporary server a run starts itself, which stops with the run: a
    # run stopped by a signal would then wait on its queued log lines
    "PREFECT_LOGGING_TO_API_ENABLED": "true" if os.environ.get("PREFECT_API_URL") else "false",
    "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",   # a log line outside a run stays on the terminal
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "GIT_PYTHON_REFRESH": "quiet",
    "MLFLOW_DISABLE_TELEMETRY": "true",     # else it writes ~/.config/mlflow/telemetry.json and sends usage events
}


FLOWS_DIR = Path(__file__).resolve().parent.parent / "flows"


def quiet_prefect(argv: list[str] | None = None) -> None:
    """Call before importing prefect: it configures logging and freezes its settings (home,
    database URL, result storage) at import time, creating the home folder. The home is
    tracking.prefect_home of the settings composed from `argv` (default: the command line when a
    flow runs as a script; a Prefect worker importing a flow keeps its own PREFECT_HOME). A flow
    run as a script whose command line does not validate is refused here (_refuse_early). When
    the command line does not compose otherwise (debug=true, flags), run_cli refuses it before
    Prefect is used: the home is then paths.artifacts/prefect as given, and nothing is created
    where its parent is missing."""
    for key, value in QUIET.items():
        os.environ.setdefault(key, value)
    warnings.filterwarnings("ignore", message="Failed to create the Prefect home directory")
    if argv is None:
        script = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
        if script is None or script.parent != FLOWS_DIR:
            os.environ.setdefault("PREFECT_HOME", os.path.abspath(os.path.join("artifacts", "prefect")))
            return
        argv = sys.argv[1:]
        if _main_is(script):      # the flow is the program (not a module run by another one's code)
            _defer_gc()
            raw = _refuse_early(argv)
            if raw is not None:
                os.environ["PREFECT_HOME"] = os.path.abspath(raw["tracking"]["prefect_home"])
                return
    os.environ["PREFECT_HOME"] = _prefect_home(argv)


def _main_is(script: Path) -> bool:
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    return main_file is not None and Path(main_file).resolve() == script


def wants_debug(argv: list[str]) -> bool:
    """debug=true on the command line: errors raise with their traceback."""
    return any(a.lower() in ("debug=true", "debug=1") for a in argv)


def _refuse_early(argv: list[str]) -> dict | None:
    """The composed settings of a flow's command line of overrides only; one that does not
    validate is refused as run_cli refuses it (the same `error:` paragraph, exit 2), but before
    the flow imports Prefect, MLflow and the pipeline (a second instead of about six). None, and
    nothing refused, for a command line with flags (--help, --cfg job, a flow's own such as
    --serve: run_cli parses them first) or with debug=true (run_cli raises with the traceback)."""
    if any(a.startswith("-") for a in argv) or wants_debug(argv):
        return None
    from metainfer_core.errors import MetaInferError
    from app.compose import load_settings

    try:
        return load_settings(argv)[1]
    except MetaInferError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


_gc_deferred = False


def _defer_gc() -> None:
    """A flow run as a script imports most of its libraries after quiet_prefect() (Prefect, MLflow,
    the pipeline: seconds): the cyclic garbage collector would walk the growing heap again and
    again meanwhile (about a second of an adapt's start-up). It waits until run_cli calls
    startup_done()."""
    global _gc_deferred
    if gc.isenabled():
        gc.disable()
        _gc_deferred = True


def startup_done() -> None:
    """Called by run_cli, the flow's modules imported: what they hold lives as long as the process,
    so it is moved out of the collector's sight (gc.freeze) before the collector is turned back
    on; and everything is frozen again at exit (atexit), so that the interpreter's shutdown does
    not walk the whole heap (about 2 s of an adapt) to free memory the OS takes back anyway.
    Nothing is done where quiet_prefect() did not defer the collector (a flow imported by a
    Prefect worker, a test calling run_cli)."""
    global _gc_deferred
    if _gc_deferred:
        _gc_deferred = False
        gc.freeze()
        gc.enable()
        atexit.register(gc.freeze)


def _prefect_home(argv: list[str]) -> str:
    from metainfer_core.errors import MetaInferError
    from app.compose import compose_raw

    overrides = [a for a in argv if not a.startswith("--")]     # flags such as --serve are no overrides
    try:
        return os.path.abspath(compose_raw(overrides)["tracking"]["prefect_home"])
    except (MetaInferError, KeyError, TypeError):
        given = [a.partition("=")[2] for a in overrides if a.partition("=")[0].lstrip("+") == "paths.artifacts"]
        return os.path.join(os.path.abspath(given[-1] if given else "artifacts"), "prefect")


def configure(s: RunSettings) -> None:
    Path(s.tracking.prefect_home).mkdir(parents=True, exist_ok=True)
    for key, value in QUIET.items():
        os.environ.setdefault(key, value)
    os.environ["PREFECT_HOME"] = s.tracking.prefect_home       # for the processes it starts (the temporary server)
    os.environ["MLFLOW_TRACKING_URI"] = s.tracking.mlflow_uri
    if s.deploy.prefect_api_url:
        os.environ["PREFECT_API_URL"] = s.deploy.prefect_api_url
    _update_prefect(s.tracking.prefect_home, s.deploy.prefect_api_url)


_SETTINGS = contextlib.ExitStack()


def use_temporary_server(s: RunSettings, api_url: str, stack: contextlib.ExitStack) -> None:
    """Point this process and the processes it starts at the run's temporary Prefect server
    (app/prefect_server.py) until `stack` closes."""
    os.environ["PREFECT_API_URL"] = api_url
    _update_prefect(s.tracking.prefect_home, api_url)
    stack.callback(_SETTINGS.close)
    stack.callback(os.environ.pop, "PREFECT_API_URL", None)


def _update_prefect(home: str, api_url: str | None) -> None:
    """Prefect froze its settings when it was imported (home, and from it the database URL and
    storage paths; the API URL): the environment alone would reach only the processes it starts,
    so this process also enters a settings context with the values that differ (a home other
    than quiet_prefect's, e.g. a second run's settings in one process; a fleet's server)."""
    if "prefect" not in sys.modules:
        return
    from prefect.settings import PREFECT_API_URL, PREFECT_HOME, get_current_settings, temporary_settings

    _SETTINGS.close()
    current = get_current_settings()
    updates = {}
    if Path(current.home).resolve() != Path(home).resolve():
        updates[PREFECT_HOME] = home
    if api_url:
        updates[PREFECT_API_URL] = api_url
    if updates:
        _SETTINGS.enter_context(temporary_settings(updates=updates))
