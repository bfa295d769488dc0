"""plan.json as a typed record (metainfer_core.plan.schema): what build_plan assembles from the
stage outputs is written and read back unchanged, and a file that is not such a plan is refused
with one paragraph naming what is wrong."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from metainfer_core.actions.base import Site, Step
from metainfer_core.backends import backend_for
from metainfer_core.decide.stage import Decision
from metainfer_core.errors import MetaInferError
from metainfer_core.fingerprint.profiler import ProfileReport
from metainfer_core.plan.plan_file import read_plan
from metainfer_core.plan.record import build_plan, write_plan
from metainfer_core.plan.schema import PLAN_SCHEMA, Plan
from metainfer_core.search.beam import SearchResult
from metainfer_core.search.candidate import Candidate
from metainfer_core.search.stage import SearchOutcome
from metainfer_core.verify import Verified
from metainfer_core.verify.stage import VerifyOutcome
from metainfer_core.zoo import build


@pytest.fixture
def plan(settings_for) -> Plan:
    """build_plan on small stage outputs: an adapted fp16 plan bound partly to the host, with
    the numpy scalars and NaN a run's figures come as."""
    s = settings_for("target=npu")
    model = build("mlp")
    default = Candidate(model, latency_ms=np.float64(2.0), peak_mem_bytes=704 * 2**10, score=1.0)
    fp16 = Candidate(model, steps=(Step("fp16", Site(("fc1", "fc2"), "all"), (("keep_io", True),)),),
                     latency_ms=0.5, peak_mem_bytes=64 * 2**10, score=0.4,
                     binding={"device": 3, "host": [{"kernel": "Cast", "nodes": ["fc1|to_fp16"], "reason": "no op"}]})
    verified = VerifyOutcome(Verified("default", 2.1, 2.2, np.int64(704 * 2**10), 0.0, 0.1),
                             [Verified("candidate1", 0.6, 0.7, 64 * 2**10, np.float32(0.001), 0.2)], [fp16], [], 1.0)
    prepared = SimpleNamespace(name="mlp", source="zoo", sha256="0" * 64, degenerate=None, warnings=[], served=None,
                               feeds=[{}] * 4, judge=SimpleNamespace(feeds=[{}] * 2),
                               judged_on="every 3rd sample of data.inputs, held out", normalized=SimpleNamespace(
        nodes_before=11, nodes_after=7, symbolic_dims={}, warnings=[]))
    return build_plan(
        settings=s, info=backend_for(s).info, prepared=prepared, profile_report=ProfileReport("v", measured=3),
        cost_model_meta=SimpleNamespace(n_records=40, val_mape=float("nan")),
        outcome=SearchOutcome(SearchResult(default, [fp16], evaluated=5), default=default),
        verified=verified, decision=Decision("adapted", "candidate1 pays", 0, {"candidate1": "chosen"}), chosen=fp16,
        timings={"normalize_s": 0.1, "total_s": 3.0}, artifact=Path("runs/x/model.onnx"), mlflow_run_id="run1")


def test_a_built_plan_round_trips_through_its_file(plan, tmp_path):
    assert plan.decision == "adapted" and plan.actions[0].nodes == ["fc1", "fc2"]
    assert plan.predictor.val_mape is None and plan.measured.accuracy_loss == pytest.approx(0.001)   # as the file holds
    assert type(plan.baseline.peak_mem_bytes) is int and type(plan.predicted.latency_ms) is float
    write_plan(tmp_path, plan)
    stored = json.loads((tmp_path / "plan.json").read_text())
    assert list(stored)[:4] == ["schema", "model", "target", "fingerprint_version"] and stored["schema"] == PLAN_SCHEMA
    assert stored["candidates"][0]["binding"] == {"device": 3, "host_kernels": 1}      # its list in the side file
    back = read_plan(tmp_path)
    assert back == plan and back.candidates[0].binding["host"][0]["kernel"] == "Cast"
    assert list(back.to_dict()) == list(plan.to_dict()) and "verify_remote" not in back.to_dict()


def test_a_plan_missing_a_required_field_is_refused_in_one_paragraph(plan, tmp_path):
    write_plan(tmp_path, plan)
    content = json.loads((tmp_path / "plan.json").read_text())
    del content["baseline"], content["model"]["sha256"]
    (tmp_path / "plan.json").write_text(json.dumps(content))
    with pytest.raises(MetaInferError) as err:
        read_plan(tmp_path)
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'plan.json'} is not a valid {PLAN_SCHEMA} plan:") and "\n" not in message
    assert "model.sha256: Field required" in message and "baseline: Field required" in message


@pytest.mark.parametrize("text, says", [('{"schema": "meta-infer/plan/v0"}', "has schema 'meta-infer/plan/v0'"),
                                        ('{"decision": "adapted"}', "has no schema"), ("[1, 2]", "holds a JSON list"),
                                        ('{"schema": ', "it is not JSON")])
def test_a_file_that_is_no_plan_of_this_version_is_refused(tmp_path, text, says):
    (tmp_path / "plan.json").write_text(text)
    with pytest.raises(MetaInferError, match=says):
        read_plan(tmp_path / "plan.json")
