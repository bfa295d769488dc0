"""plan.json, the contract of a run (record), and what is made of it: the terminal summary and
plan.md (report, plots), the run's warnings (run_warnings), which run folders a clean-up keeps
(retention) and the deployable plan a run folder holds (deployable)."""
