"""Train a target's performance predictor on the zoo:  python flows/train.py target=<name>
Fine-tune it on runtime records:                    python flows/train.py target=<name> predictor.mode=fine_tune

train: micro-benchmarks of every kernel of every zoo model's candidate plans and whole-model
runs of those plans go into the fingerprint library (what is already there is re-used); the
CatBoost kernel model and the model-level correction are validated leave-one-model-out, then
trained on everything and saved as a new revision under artifacts/predictors/<fingerprint
version>/. fine_tune: continue from the current revision on the runtime runs stored since;
kept only if held-out error does not get worse. Either way one MLflow run in
`meta-infer/predictor@<target>`. The last stdout line is `predictor: <revision folder>`."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from app.environment import quiet_prefect

quiet_prefect()  # before prefect is imported: it sets up logging at import time

from prefect import flow  # noqa: E402

from app.cli import run_cli  # noqa: E402
from app.compose import zoo_input_shapes  # noqa: E402
from app.settings import RunSettings, validate_settings  # noqa: E402
from app.tracking.runs import record_report  # noqa: E402
from metainfer_core import zoo  # noqa: E402
from metainfer_core.backends import backend_for  # noqa: E402
from metainfer_core.errors import MetaInferError  # noqa: E402
from metainfer_core.predictor.lifecycle.store import PredictorStore  # noqa: E402
from tasks.train_tasks import (build_training_set_task, fine_tune_task, predictor_folder,  # noqa: E402
                               train_offline_task)


def zoo_shapes(s: RunSettings) -> dict[str, dict[str, list[int]]]:
    """Each zoo model's deployment shapes from conf/model/<name>.yaml (composed here, in the
    main thread: Hydra's compose is not thread-safe)."""
    names = s.predictor.zoo or zoo.names()
    unknown = sorted(set(names) - set(zoo.names()))
    if unknown:
        raise MetaInferError(f"predictor.zoo names {unknown}, not zoo models; the zoo has {zoo.names()}.")
    return zoo_input_shapes(names)


def _flat(prefix: str, d: dict) -> dict[str, float]:
    return {f"{prefix}{k}": float(v) for k, v in d.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v}


@flow(name="train_predictor", validate_parameters=False)
def train_flow(raw: dict, shapes: dict) -> str:
    s = validate_settings(raw)
    version = backend_for(s).info.fingerprint_version
    stem = f"{time.strftime('%Y%m%d-%H%M%S')}-{s.target.name}-{s.predictor.mode}"
    tags = {"fingerprint_version": version, "measurement": s.target.measurement, "mode": s.predictor.mode}
    if s.predictor.mode == "fine_tune":
        result = fine_tune_task(raw, version)
        store = PredictorStore(predictor_folder(s, version))
        metrics = _flat("", result.__dict__)
        record_report(s, "predictor", stem, raw, metrics,
                      tags | {"decision": "kept" if result.accepted else "refused", "reason": result.reason[:5000],
                              "revision": str(result.current)},
                      [f for f in sorted(store.path(result.revision).iterdir()) if f.is_file()])
        return str(store.path(result.current))
    t0 = time.perf_counter()
    build = build_training_set_task(raw, shapes)
    report = train_offline_task(raw, version)
    metrics = {"n_records": report.n_records, "n_plan_runs": report.n_plan_runs, "n_models": report.n_models,
               "build_s": build.seconds, "total_s": time.perf_counter() - t0}
    metrics |= _flat("lomo.", report.metrics.get("lomo", {}))
    metrics |= {f"lomo.{m}.{k}": v for m, d in report.metrics.get("lomo_per_model", {}).items()
                for k, v in _flat("", d).items()}
    record_report(s, "predictor", stem, raw, metrics,
                  tags | {"revision": str(report.revision), "reused": str(report.reused)},
                  [Path(f) for f in report.files])
    return str(PredictorStore(predictor_folder(s, version)).path(report.revision))


def main(argv: list[str]) -> int:
    return run_cli(argv, lambda s, raw: f"predictor: {train_flow(raw, zoo_shapes(s))}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
