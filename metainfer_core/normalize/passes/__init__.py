"""Main-graph rewrites, one per module; each exposes `run(model) -> (model, changes)`.
Constant folding lives in ir/ (analysis folds shape arithmetic at the tuned sizes with it too)."""
from metainfer_core.ir import constant_folding  # noqa: F401 - the normalize pass of that name
