"""Shared command-line behaviour of the flows: compose and validate the config, point the
stores at the artifacts folder, run, and turn any failure into one paragraph and an exit code
(2: bad input or configuration, 1: a failure inside the pipeline). No traceback unless
debug=true."""
from __future__ import annotations

import logging
import sys
from typing import Callable

from metainfer_core.errors import MetaInferError
from metainfer_core.settings import Settings
from tasks.cli_help import composed_yaml, flow_help, parse_flags, prog_name
from tasks.compose import load_settings
from tasks.environment import configure


def run_cli(argv: list[str], body: Callable[[Settings, dict], str]) -> int:
    debug = any(a.lower() in ("debug=true", "debug=1") for a in argv)
    if not debug:  # Prefect logs task failures with their traceback; the paragraph below says it all
        logging.getLogger("prefect").setLevel(logging.CRITICAL)
        logging.getLogger("mlflow").setLevel(logging.WARNING)      # "Creating initial MLflow database tables..."
    try:
        argv, request = parse_flags(argv)      # --help, --cfg job
        if request == "help":
            print(flow_help(body.__globals__.get("__doc__"), prog_name(body.__globals__.get("__file__"))))
            return 0
        s, raw = load_settings(argv)
        if request == "cfg":
            print(composed_yaml(raw))
            return 0
        configure(s)
        last_line = body(s, raw)
    except MetaInferError as exc:
        if debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted; nothing was written for this run.", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence for the user
        if debug:
            raise
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"error: the run failed inside the pipeline ({type(exc).__name__}: {msg}). Nothing was written for "
              "this run. Run again with debug=true to see the traceback.", file=sys.stderr)
        return 1
    print(last_line, flush=True)
    return 0
