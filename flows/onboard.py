"""Onboard a hardware target:  python flows/onboard.py target=<name>

Runs the onboarding checklist of SPEC section 3 as a Prefect flow and writes a report
(Markdown + JSON under artifacts/onboard/, and an MLflow run). Exit 0 when every item passes;
otherwise one paragraph naming the failed items (exit 2). Last stdout line: `report: <path>`."""
from __future__ import annotations

import json
import sys
import time

from app.environment import quiet_prefect

quiet_prefect()  # before prefect is imported: it sets up logging at import time

from prefect import flow  # noqa: E402

from app.cli import run_cli  # noqa: E402
from app.settings import validate_settings  # noqa: E402
from app.tracking.runs import record_report  # noqa: E402
from metainfer_core.errors import MetaInferError  # noqa: E402
from metainfer_core.fingerprint import onboard  # noqa: E402
from tasks.onboard_tasks import (capabilities_task, concurrency_task, execution_paths_task, microbench_task,  # noqa: E402
                                 minimal_model_task, versions_task, zoo_models_task)


@flow(name="onboard", validate_parameters=False)
def onboard_flow(raw: dict) -> tuple[str, list[onboard.Item]]:
    s = validate_settings(raw)
    models = zoo_models_task()
    ops = onboard.frequent_ops(models)
    minimal = onboard.minimal_model()
    items = [versions_task(raw), capabilities_task(raw, models, ops), microbench_task(raw, models, ops),
             *minimal_model_task(raw, minimal), execution_paths_task(raw, minimal),
             concurrency_task(raw, onboard.representative_model())]
    folder = s.artifacts / "onboard"
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{s.target.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    md, js = folder / f"{stem}.md", folder / f"{stem}.json"
    md.write_text(onboard.markdown(s.target.name, s.target.measurement, items))
    js.write_text(json.dumps([i.__dict__ for i in items], indent=2, default=str))
    record_report(s, "onboard", stem, raw, {"items_passed": sum(i.passed for i in items), "items": len(items)},
                  {"measurement": s.target.measurement, "passed": str(all(i.passed for i in items))}, [md, js])
    return str(md), items


def _body(s, raw) -> str:
    report, items = onboard_flow(raw)
    for i in items:
        print(f"[meta-infer] onboard: {'PASS' if i.passed else 'FAIL'} {i.name}: {i.detail}", file=sys.stderr)
    failed = [i for i in items if not i.passed]
    if failed:
        raise MetaInferError(f"Target {s.target.name} failed onboarding: " + "; ".join(f"{i.name}: {i.detail}" for i in failed)
                             + f". The full report is {report}.")
    return f"report: {report}"


def main(argv: list[str]) -> int:
    return run_cli(argv, _body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
