"""Re-profile a target:  python flows/reprofile.py target=<name>
Nightly schedule:       python flows/reprofile.py --serve   (one deployment per reprofile.targets)

Records the target's versions, runs the quick drift check against the fingerprint library on
every execution path the target offers (each against its own fingerprint version; a path
without kernel records yet is seeded), re-measures only drifted op types under a new
fingerprint version, refreshes the predictor,
re-verifies the target's active plans (rolling back any that lost their advantage) and writes a
drift report (Markdown + JSON under artifacts/reprofile/, and an MLflow run). Last stdout line:
`report: <path>`."""
from __future__ import annotations

import json
import sys
import time

from app.environment import quiet_prefect

quiet_prefect()  # before prefect is imported: it sets up logging at import time

from prefect import flow, serve  # noqa: E402

from app.cli import run_cli  # noqa: E402
from app.compose import load_settings  # noqa: E402
from app.tracking.runs import record_report  # noqa: E402
from metainfer_core.fingerprint.reprofile import markdown  # noqa: E402
from tasks.reprofile_tasks import (drift_task, path_predictors_task, refresh_predictor_task,  # noqa: E402
                                   reverify_task)

SERVE_FLAG = "--serve"


@flow(name="reprofile", validate_parameters=False)
def reprofile_flow(overrides: list[str]) -> str:
    # composed here, not by the caller: a scheduled run calls the flow with its overrides only
    s, raw = load_settings(overrides)
    report = drift_task(raw)
    predictor = refresh_predictor_task(raw, report)
    others = path_predictors_task(raw, report)
    plans = reverify_task(raw)
    folder = s.artifacts / "reprofile"
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{s.target.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    md, js = folder / f"{stem}.md", folder / f"{stem}.json"
    md.write_text(markdown(report, plans, predictor, others))
    js.write_text(json.dumps({"drift": report.as_dict(), "predictor": predictor, "path_predictors": others,
                              "plans": plans}, indent=2, default=str))
    every = report.all_paths()
    record_report(s, "reprofile", stem, raw,
                  {"drifted_ops": len(report.drifted), "remeasured": report.remeasured, "carried": report.carried,
                   "plans_rolled_back": sum(p["decision"] == "rolled_back" for p in plans),
                   "seconds": sum(r.seconds for r in every), "paths": len(every),
                   "paths_drifted": sum(bool(r.drifted) for r in every),
                   "paths_new_version": sum(r.version_changed for r in every),
                   "paths_seeded": sum(r.status == "seeded" for r in every)},
                  {"old_fingerprint_version": report.old_version, "fingerprint_version": report.new_version,
                   "firmware": report.firmware, "measurement": s.target.measurement,
                   **{f"path.{r.path.replace(':', '.')}.fingerprint_version": r.new_version for r in report.paths},
                   **{f"path.{r.path.replace(':', '.')}.status": r.status for r in report.paths}}, [md, js])
    return str(md)


def deployments(s, overrides: list[str]) -> list:
    """One nightly deployment per configured target, each re-composing its config at run time."""
    base = [o for o in overrides if not o.startswith("target=")]
    return [reprofile_flow.to_deployment(name=f"reprofile-{t}", cron=s.reprofile.cron,
                                         parameters={"overrides": base + [f"target={t}"]})
            for t in s.reprofile.targets]


def main(argv: list[str]) -> int:
    serving = SERVE_FLAG in argv
    overrides = [a for a in argv if a != SERVE_FLAG]

    def body(s, raw) -> str:
        if serving:
            serve(*deployments(s, overrides))      # blocks; needs PREFECT_API_URL of a running Prefect server
            return "served"
        return f"report: {reprofile_flow(overrides)}"

    return run_cli(overrides, body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
