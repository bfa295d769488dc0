"""Peak resident memory of this process around a piece of work (Linux).

Writing 5 to /proc/self/clear_refs resets the high-water mark VmHWM to the current RSS, so
peak - start is what the work itself added. Where that is not available (other OS, no
permission), falls back to the RSS growth, which underestimates transient peaks."""
from __future__ import annotations

import re
from pathlib import Path

_STATUS = Path("/proc/self/status")


def _read_kb(field: str) -> int:
    m = re.search(rf"{field}:\s+(\d+) kB", _STATUS.read_text())
    return int(m.group(1)) if m else 0


class PeakMemory:
    """with PeakMemory() as pm: work()  ->  pm.bytes"""

    def __enter__(self) -> "PeakMemory":
        try:
            Path("/proc/self/clear_refs").write_text("5")
            self._reset = True
        except OSError:
            self._reset = False
        self._start = _read_kb("VmRSS")
        self.bytes = 0
        return self

    def __exit__(self, *exc) -> None:
        end = _read_kb("VmHWM") if self._reset else _read_kb("VmRSS")
        self.bytes = max(0, end - self._start) * 1024
