"""The one exception type users see: its message is a single paragraph saying what was
wrong and what to do. Entry points print it without a traceback and exit non-zero."""


class MetaInferError(Exception):
    """A user-facing error (bad input, bad config, impossible conversion)."""
