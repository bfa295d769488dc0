"""Prefect tasks: thin wrappers over metainfer_core's stage entry points, one module per flow
(`<flow>_tasks.py`). The application shell they run in (command line, configuration, stores,
MLflow tracking, the Prefect server) is the app package."""
