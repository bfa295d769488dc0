"""The benchmark: `make bench` (bench/suite.py) adapts every model of the zoo and of the corpus of
real models (bench/corpus/) as a user would, times each plan against the peers a user would try
instead (bench/peers.py), and writes the report, the plots and the results block of
docs/benchmarks.md (bench/report.py, bench/goals.py, bench/plots.py). The other command lines run
as `python -m bench.<name>` from the repository root (docs/benchmarks.md). One-off experiments
live in experiments/."""
