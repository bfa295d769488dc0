"""meta-infer core library: plain Python, no Prefect / Hydra / MLflow imports."""
