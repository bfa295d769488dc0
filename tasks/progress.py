"""Progress lines on stderr. On a terminal, a stage's counted progress ("profile: 619/954 kernel
measurements, ~3s left", "search: depth 2/4, ...") is one line redrawn in place with a bar; the
next other line starts below it. Elsewhere (a log file, CI, a pipe) every line is printed as it
is, so logs keep each step."""
from __future__ import annotations

import re
import sys
from typing import TextIO

_COUNTED = re.compile(r"^(?P<stage>[\w ]+): \D*?(?P<done>\d+)/(?P<total>\d+)\b")
BAR = 20


class Progress:
    def __init__(self, stream: TextIO | None = None):
        self._stream = stream
        self._open: str | None = None        # the stage whose line is being redrawn

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


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


say = Progress()
