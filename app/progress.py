"""Progress lines on stderr. On a terminal, a stage's counted progress ("profile: 619/954 kernel
measurements, ~3s left", "search: depth 2/4, ...") is one line redrawn in place with a bar; the
next other line starts below it. Elsewhere (a log file, CI, a pipe) every line is printed as it
is, so logs keep each step. Inside a Prefect flow or task run every line also goes to that run's
log (the UI's run page; counted progress at every tenth of the way), through the run logger's
API handler only: the terminal shows each line once, and Prefect's logging levels, kept quiet
for the terminal, do not drop them."""
from __future__ import annotations

import logging
import re
import sys
from typing import TextIO

_COUNTED = re.compile(r"^(?P<stage>[\w ]+): \D*?(?P<done>\d+)/(?P<total>\d+)\b")
BAR = 20


class Progress:
    def __init__(self, stream: TextIO | None = None):
        self._stream = stream
        self._open: str | None = None        # the stage whose line is being redrawn
        self._logged: dict[str, int] = {}    # stage -> the tenth of its counted progress last sent to the run log

    @property
    def stream(self) -> TextIO:
        return self._stream or sys.stderr

    def close(self) -> None:
        """End a line being redrawn (before an error message or the end of the run)."""
        if self._open is not None:
            self.stream.write("\n")
            self.stream.flush()
            self._open = None

    def __call__(self, msg: str) -> None:
        self._to_run_log(msg)
        out = self.stream
        counted = _COUNTED.match(msg) if _isatty(out) else None
        if counted is None:
            self.close()
            out.write(f"[meta-infer] {msg}\n")
        else:
            stage = counted["stage"]
            if self._open is not None and self._open != stage:
                out.write("\n")
            done, total = int(counted["done"]), max(int(counted["total"]), 1)
            filled = min(BAR, BAR * done // total)
            out.write(f"\r[meta-infer] [{'#' * filled}{'-' * (BAR - filled)}] {msg}\x1b[K")
            self._open = stage
        out.flush()

    def _to_run_log(self, msg: str) -> None:
        counted = _COUNTED.match(msg)
        if counted is not None:     # a redrawn line: every tenth of the way, not every step
            tenth = 10 * int(counted["done"]) // max(int(counted["total"]), 1)
            if self._logged.get(counted["stage"]) == tenth:
                return
            self._logged[counted["stage"]] = tenth
        run_log(msg.removeprefix("WARNING: "), logging.WARNING if msg.startswith("WARNING:") else logging.INFO)


def run_log(msg: str, level: int = logging.INFO) -> None:
    """`msg` into the current Prefect flow or task run's log; nothing outside a run (or before
    Prefect is imported)."""
    if "prefect" not in sys.modules:
        return
    from prefect.context import FlowRunContext, TaskRunContext
    from prefect.logging import get_run_logger
    from prefect.logging.handlers import APILogHandler

    if FlowRunContext.get() is None and TaskRunContext.get() is None:
        return
    adapter = get_run_logger()
    handlers = [h for h in adapter.logger.handlers if isinstance(h, APILogHandler)]
    if not handlers:
        return
    msg, kwargs = adapter.process(msg, {})
    record = adapter.logger.makeRecord(adapter.logger.name, level, __file__, 0, msg, None, None,
                                       extra=kwargs.get("extra"))
    for handler in handlers:
        handler.handle(record)


def flush_run_logs() -> None:
    """Send the run log lines still queued, before the temporary Prefect server stops."""
    if "prefect" not in sys.modules:
        return
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


say = Progress()
