"""`python flows/adapt.py` end to end, as a user runs it: plan.json contract, chosen model,
MLflow run; and bad input failing with one paragraph, a non-zero exit and nothing written."""
from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import onnx
import pytest
from mlflow.tracking import MlflowClient

from metainfer_core.plan.report import plan_name
from metainfer_core.zoo import build

PLAN_FIELDS = ["schema", "model", "target", "fingerprint_version", "weights", "decision", "reason", "actions",
               "predicted", "measured", "baseline", "timings", "artifact", "mlflow_run_id"]
TIMINGS = ["normalize_s", "profile_s", "train_s", "search_s", "compile_s", "verify_s", "total_s"]


def _check_contract(plan: dict, tmp_path) -> None:
    for f in PLAN_FIELDS:
        assert f in plan and plan[f] is not None, f
    assert set(plan["model"]) >= {"name", "source", "sha256"} and len(plan["model"]["sha256"]) == 64
    assert set(plan["target"]) >= {"name", "measurement", "firmware", "driver", "runtime"}
    assert plan["decision"] in ("adapted", "rolled_back", "skipped", "default")
    for section in ("measured", "baseline"):
        for k in ("latency_ms", "peak_mem_bytes", "accuracy_loss", "compile_s"):
            assert plan[section][k] is not None, (section, k)
    for k in ("latency_ms", "peak_mem_bytes", "accuracy_loss", "score"):
        assert plan["predicted"][k] is not None
    assert all(plan["timings"][k] >= 0 for k in TIMINGS)
    artifact = onnx.load(plan["artifact"])
    onnx.checker.check_model(artifact, full_check=True)
    run = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db").get_run(plan["mlflow_run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.tags["fingerprint_version"] == plan["fingerprint_version"]
    assert run.data.tags["firmware"] == plan["target"]["firmware"]
    assert run.data.params["weights.name"] and "baseline.latency_ms" in run.data.metrics
    assert not [k for k in run.data.params if k.split(".")[0] in ("feedback", "reprofile", "task_runner", "models")]
    assert run.data.tags["plan"] == plan_name(plan["actions"])
    assert run.data.metrics["n_warnings"] == len(plan["warnings"])
    assert run.data.tags["actions"] == (",".join(a["kind"] for a in plan["actions"]) or "none")
    assert run.data.tags["mlflow.note.content"].startswith("# ")       # plan.md as the run's description
    assert run.info.run_name.startswith(f"{plan['decision']} ") and f"{plan['model']['name']}@" in run.info.run_name
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    experiment = client.get_experiment(run.info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"     # the model-training view
    names = {a.path for a in MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db").list_artifacts(run.info.run_id)}
    assert {"plan.json", "plan.md", "feature_map.json", "search_log.json"} <= names and not names & {"model.onnx", "default.onnx"}   # stored once
    version = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db").get_model_version(
        plan["registry"]["registered_model"], plan["registry"]["active_version"])
    assert Path(version.source).parent == Path(plan["artifact"]).parent         # the run folder's model


@pytest.mark.slow
def test_design_card_command_on_fpga(run_flow, migrated, tmp_path):
    migrated(tmp_path)
    # with the temporary Prefect server a user's run starts: its flow runs land in paths.artifacts
    res = run_flow("adapt", "target=fpga", "weights=embedded", "search=quick", f"paths.artifacts={tmp_path}",
                   own_server=True)
    assert res.returncode == 0, res.stderr
    plan = res.plan
    _check_contract(plan, tmp_path)
    assert plan["target"]["measurement"] == "modeled" and "simulated" in plan["target"]["note"]
    assert plan["weights"]["name"] == "embedded"
    assert plan["decision"] == "adapted" and plan["actions"]        # the default is far from best on an fpga
    assert plan["measured"]["latency_ms"] < plan["baseline"]["latency_ms"]
    log = json.loads((res.plan_path.parent / "search_log.json").read_text())      # what the search tried
    assert len([e for e in log if "n" in e and "event" not in e]) == plan["search"]["evaluated"] > 0
    _check_readable(res, plan)
    # the Prefect flow run, as its UI lists it: named like the run folder, tagged, plan.md as an artifact
    db = sqlite3.connect(tmp_path / "prefect" / "prefect.db")
    runs = {name: json.loads(tags) for name, tags in db.execute("select name, tags from flow_run")}
    assert runs == {res.plan_path.parent.name: ["model:resnet_tiny", "target:fpga"]}
    assert db.execute("select key, type from artifact").fetchall() == [("plan-resnet-tiny-fpga", "markdown")]
    # the same model on a second target: its run joins the model's one experiment, told apart by the tag
    other = run_flow("adapt", "target=asic", "search=quick", "profile.reps=3", "profile.warmup=0",
                     "profile.batch_gradient=[1]", "verify.runs=3", f"paths.artifacts={tmp_path}", own_server=True)
    assert other.returncode == 0, other.stderr
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    runs = {r.data.tags["target"]: r for r in client.search_runs(
        [client.get_experiment_by_name("meta-infer/resnet_tiny").experiment_id])}
    assert set(runs) == {"fpga", "asic"} and runs["asic"].data.params["target.name"] == "asic"
    assert runs["fpga"].info.run_id == plan["mlflow_run_id"] and runs["asic"].info.run_id == other.plan["mlflow_run_id"]
    assert {e.name for e in client.search_experiments()} == {"Default", "meta-infer/resnet_tiny"}


def _check_readable(res, plan: dict) -> None:
    """The summary ending stdout and plan.md say what was done, by how much, and why."""
    name, speedup = plan_name(plan["actions"]), plan["baseline"]["latency_ms"] / plan["measured"]["latency_ms"]
    assert "int8" in name and "candidate" not in name
    out = res.stdout.strip().splitlines()
    start = out.index(f"resnet_tiny on fpga (modeled): adapted, {speedup:.2f}x faster - {name}")
    summary = "\n".join(out[start:])
    assert f"{speedup:.2f}x faster" in summary and "latency p90 (ms)" in summary and "peak memory" in summary
    assert "why: candidate" in summary and f"({name})" in summary and "stages: normalize" in summary
    assert out[-2] == f"report: {res.plan_path.with_name('plan.md')}"
    md = res.plan_path.with_name("plan.md").read_text()
    assert md.startswith(f"# resnet_tiny on fpga (modeled): adapted, {speedup:.2f}x faster - {name}")
    for section in ("## What changed", "## Default vs chosen", "## Candidates verified", "## Warnings",
                    "## Stage times"):
        assert section in md
    for title, png in (("Latency vs accuracy loss", "latency_vs_loss.png"),
                       ("Predicted vs measured latency", "predicted_vs_measured.png")):
        assert f"![{title}]({png})" in md
        assert res.plan_path.with_name(png).read_bytes().startswith(b"\x89PNG")
    verdicts = [c["verdict"] for c in plan["candidates"]]
    assert sum(v.startswith("chosen") for v in verdicts) == 1 and all(v in md for v in verdicts)
    assert plan["measured"]["p90_ms"] >= plan["measured"]["latency_ms"]
    assert not [w for w in plan["warnings"] if w.startswith(("memory:", "predictor:"))]     # fits, predicted well


@pytest.mark.slow
def test_any_onnx_file_on_cpu_then_library_reuse(run_flow, migrated, tmp_path):
    migrated(tmp_path)
    path = tmp_path / "my_mlp.onnx"
    onnx.save(build("mlp", seed=3), path)
    args = ["target=cpu", "model=file", f"model.path={path}", "model.input_shapes={input:[4,256]}", "search=quick",
            f"paths.artifacts={tmp_path}"]
    first = run_flow("adapt", *args)
    assert first.returncode == 0, first.stderr
    plan = first.plan
    _check_contract(plan, tmp_path)
    assert plan["model"]["name"] == "my_mlp" and plan["target"]["measurement"] == "measured"
    assert plan["model"]["nodes_after"] < plan["model"]["nodes_before"]      # MatMul+Add folded into Gemm
    assert plan["profile"]["measured"] > 0
    second = run_flow("adapt", *args)
    assert second.returncode == 0, second.stderr
    assert second.plan["profile"]["measured"] == 0 and second.plan["profile"]["reused"] > 0
    # verify recorded each plan's planned peak beside its measured one: the second run predicts the
    # default's peak through the default path's fit (the runtime's footprint: ~10x the planned
    # tensors of this MLP), no longer as planned
    off = [abs(math.log(p["baseline"]["predicted_peak_mem_bytes"] / p["baseline"]["peak_mem_bytes"]))
           for p in (plan, second.plan)]
    assert off[1] < off[0] / 2, (off, second.plan["search"])


@pytest.mark.parametrize("args, fragment", [
    (["target=tpu"], "Unknown target option 'tpu'"),
    (["weights.memory=-0.5"], "weights.memory"),
    (["search.beam_width=0"], "search.beam_width"),
    (["model=file"], "model.path"),
    (["target=fpga", "target.spec.dram_gbps=0"], "target.spec.dram_gbps=0"),
])
def test_bad_config_fails_fast(run_flow, tmp_path, args, fragment):
    res = run_flow("adapt", *args, f"paths.artifacts={tmp_path}")
    assert res.returncode == 2
    assert fragment in res.stderr and "Traceback" not in res.stderr
    assert len([line for line in res.stderr.splitlines() if line.startswith("error:")]) == 1
    assert not (tmp_path / "runs").exists()
