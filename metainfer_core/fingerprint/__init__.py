"""Fingerprint library (database) and the profiler that fills it."""
from metainfer_core.fingerprint.library import FingerprintLibrary, Measurement

__all__ = ["FingerprintLibrary", "Measurement"]
