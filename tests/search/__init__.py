"""The search's tests (a package: tests/test_budget.py and tests/search/test_budget.py both exist,
and pytest's default import mode needs them apart). Helpers: `search.fakes`, `search.helpers`."""
