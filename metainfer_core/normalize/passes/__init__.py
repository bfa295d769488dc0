"""Main-graph rewrites, one per module; each exposes `run(model) -> (model, changes)`."""
