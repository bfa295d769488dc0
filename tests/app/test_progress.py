"""Progress on stderr: on a terminal a stage's counted progress is one line redrawn in place with a
bar, and the next other line starts below it; elsewhere every line is printed as it is."""
from __future__ import annotations

import io

from app.progress import Progress


class Terminal(io.StringIO):
    """What a terminal would receive (a stream that says it is a TTY)."""

    def isatty(self) -> bool:
        return True


STEPS = ["profile: 10/40 kernel measurements, ~3s left", "profile: 40/40 kernel measurements, ~0s left",
         "profile: 38 measured, 2 reused", "search: depth 1/4, beam 4/4, 12 new candidates",
         "search: depth 2/4, beam 4/4, 9 new candidates", "decision: adapted"]


def test_a_log_keeps_every_line():
    log = io.StringIO()
    say = Progress(log)
    for msg in STEPS:
        say(msg)
    assert log.getvalue() == "".join(f"[meta-infer] {m}\n" for m in STEPS)


def test_a_terminal_redraws_counted_progress_in_place():
    tty = Terminal()
    say = Progress(tty)
    for msg in STEPS:
        say(msg)
    say.close()
    lines = tty.getvalue().split("\n")
    # profile's two counted steps share one line; the bar is full at 40/40
    assert lines[0].count("\r") == 2 and lines[0].endswith("[####################] profile: 40/40 kernel "
                                                            "measurements, ~0s left\x1b[K")
    assert "[#####---------------] profile: 10/40" in lines[0]
    assert lines[1] == "[meta-infer] profile: 38 measured, 2 reused"
    assert lines[2].count("\r") == 2 and "[##########----------] search: depth 2/4" in lines[2]
    assert lines[3] == "[meta-infer] decision: adapted" and lines[4] == ""
    say.close()                                     # nothing open: writes nothing
    assert tty.getvalue().endswith("adapted\n")


def test_the_run_log_gets_every_line_and_counted_progress_every_tenth(monkeypatch):
    # what reaches Prefect's run log (read back through the Prefect client in test_run_records.py)
    import logging

    from app import progress

    sent: list[tuple[str, int]] = []
    monkeypatch.setattr(progress, "run_log", lambda msg, level=logging.INFO: sent.append((msg, level)))
    say = progress.Progress(io.StringIO())
    for i in range(1, 101):
        say(f"profile: {i}/100 kernel measurements")
    say("WARNING: budget: verify took 13 s")
    counted = [m for m, _ in sent if m.startswith("profile:")]
    assert counted[0] == "profile: 1/100 kernel measurements" and counted[-1] == "profile: 100/100 kernel measurements"
    assert len(counted) == 11
    assert sent[-1] == ("budget: verify took 13 s", logging.WARNING)
