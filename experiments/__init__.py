"""One-off experiments that justified a default, kept to re-run when that default is in doubt:
`python -m experiments.<name>` from the repository root. Not part of the benchmark product
(bench/) nor of the tests; experiments/README.md says what each one showed."""
