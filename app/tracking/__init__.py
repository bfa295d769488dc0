"""MLflow tracking of the runs, in parts: runs (one MLflow run per adapt or report-style flow),
experiments (where a run is recorded), registry (the active plan of each model and target),
masking (no secret reaches MLflow), reaping (runs whose process died are marked FAILED) and
clients (the MLflow clients of a run's settings)."""
