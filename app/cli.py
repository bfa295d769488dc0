"""Shared command-line behaviour of the flows: compose and validate the config, point the
stores at the artifacts folder, run, and turn any failure into one paragraph and an exit code
(2: bad input or configuration, 1: a failure inside the pipeline, 130/143: stopped by SIGINT/SIGTERM).
No traceback unless debug=true."""
from __future__ import annotations

import contextlib
import logging
import signal
import sys
from typing import Callable

from app import progress, stores
from app.cli_help import composed_yaml, flow_help, parse_flags, prog_name
from app.compose import load_settings
from app.environment import configure, startup_done, use_temporary_server, wants_debug
from app.settings import RunSettings
from metainfer_core.errors import MetaInferError


class Terminated(BaseException):
    """SIGTERM, raised where the run is, so that it unwinds like Ctrl-C (Python's default would
    end the process on the spot: no MLflow run ended, the temporary server left behind)."""


_received: list[int] = []      # the stop signals this process got, so that a library that wraps the
# exception a handler raised (into one of its own Exceptions) still ends the run as stopped


def stop_signal() -> str | None:
    """SIGINT or SIGTERM when one has reached this process, else None."""
    return signal.Signals(_received[0]).name if _received else None


def _unwinding() -> None:
    # the run is ending its MLflow run and stopping its server (seconds): a second Ctrl-C (people
    # press it twice) would cut that short and leave both behind; SIGKILL still ends it at once
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _raise_terminated(signum, _frame):
    _received.append(signum)
    _unwinding()
    raise Terminated(signum)


def _raise_interrupt(signum, _frame):
    _received.append(signum)
    _unwinding()
    raise KeyboardInterrupt


def stopped_by(exc: BaseException) -> str | None:
    """The signal that ended the run, by name, when `exc` is how an interrupt surfaces (or
    whatever a library raised instead once one had arrived)."""
    for e in _causes(exc):       # a library may raise its own error while the interrupt unwinds it
        if isinstance(e, KeyboardInterrupt):
            return stop_signal() or "SIGINT"
        if isinstance(e, Terminated) or getattr(e, "signal", None) == signal.SIGTERM:   # Prefect's TerminationSignal
            return stop_signal() or "SIGTERM"
    return stop_signal()


def _causes(exc: BaseException):
    """`exc` and the exceptions it was raised from or while handling, each once."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _say_stopped(name: str) -> int:
    print(f"error: stopped by {name}; nothing was kept for this run (an MLflow run it had started is marked "
          "KILLED).", file=sys.stderr)
    return 130 if name == "SIGINT" else 143


def run_cli(argv: list[str], body: Callable[[RunSettings, dict], str]) -> int:
    startup_done()      # the garbage collector, deferred by quiet_prefect() while the flow imported its modules
    debug = wants_debug(argv)
    if not debug:  # Prefect logs task failures with their traceback; the paragraph below says it all
        logging.getLogger("prefect").setLevel(logging.CRITICAL)
        logging.getLogger("mlflow").setLevel(logging.WARNING)      # "Creating initial MLflow database tables..."
    previous = signal.signal(signal.SIGTERM, _raise_terminated), signal.signal(signal.SIGINT, _raise_interrupt)
    try:
        argv, request = parse_flags(argv)      # --help, --cfg job
        if request == "help":
            print(flow_help(body.__globals__.get("__doc__"), prog_name(body.__globals__.get("__file__"))))
            return 0
        s, raw = load_settings(argv)
        if request == "cfg":
            print(composed_yaml(raw))
            return 0
        stores.check(s)
        configure(s)
        with contextlib.ExitStack() as stack:       # the temporary Prefect server stops on every way out
            api_url = stores.prepare(s, stack)
            if api_url:
                use_temporary_server(s, api_url, stack)
            try:
                last_line = body(s, raw)
            finally:
                progress.say.close()        # a progress line being redrawn ends before anything else
                if stop_signal() is None:   # a stopped run ends within seconds, its log lines or not
                    progress.flush_run_logs()   # while the temporary Prefect server still runs
    except MetaInferError as exc:
        if debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the last line of defence for the user
        if debug:
            raise
        if stopped_by(exc):
            return _say_stopped(stopped_by(exc))
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"error: the run failed inside the pipeline ({type(exc).__name__}: {msg}). Nothing was written for "
              "this run. Run again with debug=true to see the traceback.", file=sys.stderr)
        return 1
    except BaseException as exc:
        name = stopped_by(exc)
        if name is None:
            raise
        return _say_stopped(name)
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
    print(last_line, flush=True)
    return 0
