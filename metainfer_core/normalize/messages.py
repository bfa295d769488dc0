"""Wording shared by the stage's error messages."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text (library messages carry C++ context below it)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
