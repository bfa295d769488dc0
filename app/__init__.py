"""The application shell around the flows: the command line (cli, cli_help), the configuration
(compose: Hydra composition; settings: RunSettings), the stores and the temporary Prefect server
(environment, stores, prefect_server), progress lines (progress), the flow run's name and
artifact (flow_run), fleet deployments (fleet) and MLflow tracking (tracking/). The Prefect tasks
live in tasks/; metainfer_core imports nothing from here."""
