"""The remote-verify mailbox (metainfer_core/verify/mailbox.py) on SQLite: a request
stores the plans and the validation inputs byte for byte, the host's side times them with the
same verify() as a local run, and the requester's result equals a local verify of the same
plans on the same (seeded, modeled) target. The fleet end to end is in tests/flows/test_fleet.py."""
from __future__ import annotations

import numpy as np
import pytest

from metainfer_core.accuracy.metric import plan_loss, run_cpu
from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.errors import MetaInferError
from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.verify import mailbox
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.verify import verify
from metainfer_core.verify.measure import with_accuracy
from metainfer_core.zoo import build

from twins import backend


def _plans():
    m = build("mlp")
    params = {"scope": "all"}
    fp16 = ACTIONS["fp16"]
    site = fp16.sites(m, params, backend("fpga").info)[0]
    return [("default", m), ("candidate1", fp16.apply(m, site, params, ActionContext(target=backend("fpga").info)))]


def test_request_round_trip_and_result_equal_a_local_verify(tmp_path):
    lib = FingerprintLibrary(f"sqlite:///{tmp_path}/fp.db")
    models = _plans()
    feeds = [random_feeds(models[0][1], seed=i) for i in range(3)]
    rid = mailbox.put_request(lib, "fpga", models, feeds, runs=5, warmup=1)

    req = mailbox.get_request(lib, rid)
    assert (req.target, req.runs, req.warmup) == ("fpga", 5, 1)
    assert [(label, m.SerializeToString()) for label, m in req.models] == \
        [(label, m.SerializeToString()) for label, m in models]
    assert [sorted(f) for f in req.feeds] == [sorted(f) for f in feeds]
    for got, sent in zip(req.feeds, feeds):
        for k in sent:
            assert got[k].dtype == sent[k].dtype and np.array_equal(got[k], sent[k])
    assert mailbox.get_result(lib, rid) is None            # pending

    # the host's side, on its own backend, and the result through the store
    result = mailbox.measure(backend("fpga"), req)
    result.worker = {"flow_run_id": "x", "hostname": "h"}
    mailbox.put_result(lib, rid, result)
    back = mailbox.get_result(lib, rid)
    assert back.worker == {"flow_run_id": "x", "hostname": "h"}
    assert set(back.outputs) == {"default", "candidate1"}
    reference = run_cpu(models[0][1], feeds)
    remote = with_accuracy(back, reference, plan_loss)

    # the same plans verified locally on a fresh backend of the same target and seed
    local = verify(backend("fpga"), models, feeds, reference, 5, 1, plan_loss)
    assert [r.label for r in remote] == [r.label for r in local]
    for r, l in zip(remote, local):
        assert r.ok and l.ok
        assert r.samples_ms == l.samples_ms and r.latency_ms == l.latency_ms and r.p90_ms == l.p90_ms
        assert r.peak_mem_bytes == l.peak_mem_bytes
        assert r.accuracy_loss == pytest.approx(l.accuracy_loss, abs=1e-12)
    assert remote[1].peak_mem_bytes < remote[0].peak_mem_bytes and remote[1].accuracy_loss > 0     # fp16: real figures

    mailbox.delete_request(lib, rid)
    assert mailbox.get_result(lib, rid) is None
    with pytest.raises(MetaInferError, match="No verify request"):
        mailbox.get_request(lib, rid)
    with pytest.raises(MetaInferError, match="is gone"):
        mailbox.put_result(lib, rid, result)


def test_a_plan_that_fails_on_the_target_is_rejected_not_fatal(tmp_path):
    lib = FingerprintLibrary(f"sqlite:///{tmp_path}/fp.db")
    (label, m), broken = _plans()[0], build("mlp")
    del broken.graph.node[0]                                    # dangling input: cannot compile
    feeds = [random_feeds(m, seed=0)]
    rid = mailbox.put_request(lib, "fpga", [(label, m), ("candidate1", broken)], feeds, runs=2, warmup=0)
    result = mailbox.measure(backend("fpga"), mailbox.get_request(lib, rid))
    mailbox.put_result(lib, rid, result)
    ok, bad = with_accuracy(mailbox.get_result(lib, rid), run_cpu(m, feeds), plan_loss)
    assert ok.ok and ok.accuracy_loss == pytest.approx(0, abs=1e-9) and len(ok.samples_ms) == 2
    assert not bad.ok and bad.error and bad.samples_ms == [] and np.isnan(bad.latency_ms)


def test_remote_verify_needs_a_prefect_server(settings_for):
    with pytest.raises(MetaInferError) as err:
        settings_for("deploy.remote_verify=true")
    assert "needs a Prefect server" in str(err.value) and "deploy=fleet" in str(err.value)
    s = settings_for("deploy=fleet", "deploy.remote_verify=true", "deploy.remote_verify_timeout_s=60")
    assert s.deploy.remote_verify and s.deploy.remote_verify_timeout_s == 60
    assert not settings_for().deploy.remote_verify and not settings_for("deploy=fleet").deploy.remote_verify
