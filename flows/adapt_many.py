"""Adapt many models to one target:  python flows/adapt_many.py target=<name> models=[m1,m2,...]

First the shared work, once, in order: every model is normalized and profiled into the
fingerprint library, and the target's predictor is trained. Then the adapt flow (the same as
flows/adapt.py, one nested flow run, MLflow run and plan folder per model) is mapped over the
models with a Prefect task runner (task_runner.kind: threads by default, process, or dask via
prefect-dask). Every adapt then finds the same library and the same, frozen predictor, so the
plans do not depend on which model finishes first. Writes one summary table to stdout and to
artifacts/many/<target>-<time>.md (+ .json). Last stdout line: `summary: <path>`."""
from __future__ import annotations

import json
import sys
import time

from app.environment import quiet_prefect

quiet_prefect()  # before prefect is imported: it sets up logging at import time

from prefect import flow  # noqa: E402

from app.cli import run_cli  # noqa: E402
from app.compose import load_settings  # noqa: E402
from app.settings import validate_settings  # noqa: E402
from metainfer_core.errors import MetaInferError  # noqa: E402
from tasks.adapt_tasks import Run, normalize_task, profile_task, train_predictor_task  # noqa: E402
from tasks.many_tasks import (adapt_model_task, init_tracking_store, markdown_table, summary_row,  # noqa: E402
                              task_runner)


@flow(name="adapt_many", validate_parameters=False)
def adapt_many_flow(raws: list[dict]) -> list[str]:
    version = None
    for raw in raws:      # shared library and predictor first, so the mapped runs cannot race for them
        run = Run.of(raw)
        version = profile_task(run, normalize_task(run)).fingerprint_version
    train_predictor_task(Run.of(raws[0]), version)
    init_tracking_store(validate_settings(raws[0]))
    # each mapped run uses that predictor as it is: verify's runtime runs of the models that
    # finish first would otherwise recalibrate it for the others, and plans would follow run order
    frozen = [{**raw, "predictor": {**raw["predictor"], "frozen": True}} for raw in raws]
    futures = adapt_model_task.map(frozen)
    return [f.result()["plan"] for f in futures]


def per_model(argv: list[str], models: list[str]) -> list[dict]:
    base = [a for a in argv if a.partition("=")[0].lstrip("+") not in ("models", "model")]
    return [load_settings(base + [f"model={m}"])[1] for m in models]


def main(argv: list[str]) -> int:
    def body(s, raw) -> str:
        if not s.models:
            raise MetaInferError("No models to adapt: give models=[name,...] (zoo models; "
                                 "see conf/model/), e.g. models=[mlp,resnet_tiny].")
        raws = per_model(argv, s.models)
        plans = adapt_many_flow.with_options(task_runner=task_runner(s))(raws)
        rows = [summary_row(p) for p in plans]
        table = markdown_table(rows, s.target.name, s.target.measurement)
        folder = s.artifacts / "many"
        folder.mkdir(parents=True, exist_ok=True)
        stem = f"{s.target.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        (folder / f"{stem}.json").write_text(json.dumps(rows, indent=2))
        (folder / f"{stem}.md").write_text(table)
        print(table)
        return f"summary: {folder / f'{stem}.md'}"

    return run_cli(argv, body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
