"""The benchmarks: libraries (corpus, peers, ort_baselines, modelset, report, ...) and the command
lines run as `python -m bench.<name>` from the repository root (docs/benchmarks.md)."""
