"""Prefect tasks: thin wrappers over metainfer_core, plus the Hydra/MLflow glue."""
