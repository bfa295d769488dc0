"""bench/peers.py for real, on a zoo model: every peer converts, compiles, runs and is timed
interleaved (3 rounds), or says why not; a peer that fails never stops the others."""
from __future__ import annotations

import json
import math

import onnx
import pytest

from bench import labels, ort_baselines, peers
from metainfer_core import zoo
from metainfer_core.accuracy.metric import run_cpu
from metainfer_core.ir.tensors import random_feeds
from plan_content import plan_content


@pytest.fixture(scope="module")
def mlp() -> onnx.ModelProto:
    return zoo.build("mlp", seed=0)


def _done(row: dict) -> bool:
    """A latency and a loss, or a failure reason."""
    if row["error"]:
        return isinstance(row["error"], str) and ": " in row["error"] and row["latency_ms"] is None
    return row["latency_ms"] > 0 and math.isfinite(row["latency_ms"]) and row["accuracy_loss"] is not None


def test_every_peer_is_timed_or_says_why(mlp):
    feeds = [random_feeds(mlp, seed=i) for i in range(2)]
    build = peers.builders(mlp, feeds) | {"meta_infer": lambda: peers.PlanPeer(plan=mlp)}
    out = peers.measure(build, feeds, run_cpu(mlp, feeds), rounds=3, warmup=1, min_timed_s=0)
    assert list(out) == [*labels.PEERS, "meta_infer"]
    assert all(_done(r) for r in out.values()), out
    for label in ("ort_default", "ov_f32", "meta_infer"):          # fp32 paths: these must run
        assert out[label]["error"] is None and len(out[label]["samples_ms"]) == 3, out[label]
    assert out["ov_f32"]["accuracy_loss"] < 1e-4
    aac = out["ov_nncf_aac"]                                     # NNCF's accuracy control, in its own process
    assert aac["error"] is None and aac["path"]["precision"] == "int8+f32" and aac["accuracy_loss"] <= 0.01, aac
    assert out["ov_f32"]["path"]["precision"] == "f32" and out["ov_f32"]["path"]["runtime"].startswith("openvino")
    assert out["meta_infer"]["path"]["loader"] == "model.onnx" and out["meta_infer"]["accuracy_loss"] < 1e-6
    r = peers.ratios(out)
    assert r["ort_default"] == pytest.approx(1.0) and all(v is None or v > 0 for v in r.values())


def test_openvino_peers_compile_as_a_plan_bound_to_openvino():
    """The `cpu` target's OpenVINO settings (one thread, latency hint, one stream); ov_default
    leaves the precision to the plugin (bf16 where the CPU has it), ov_f32 forces f32."""
    default, f32 = peers.ov_cpu_backend().config(), peers.ov_cpu_backend("f32").config()
    assert f32 == dict(default, INFERENCE_PRECISION_HINT="f32")
    assert (default["INFERENCE_NUM_THREADS"], default["PERFORMANCE_HINT"], default["NUM_STREAMS"]) == (1, "LATENCY", 1)


def test_onnx_runtime_peers_run_at_the_threads_a_plan_is_verified_at(mlp):
    """The serving group's threads (one under the defaults), not every core: conf/target/cpu.yaml
    names none, and a session without them takes all."""
    from app.compose import target_backend

    threads = target_backend("cpu").spec["intra_op_threads"]
    assert threads == 1
    assert peers.OrtPeer(mlp).compiled.session.get_session_options().intra_op_num_threads == threads


def test_a_failing_peer_is_a_result_not_a_crash(mlp):
    feeds = [random_feeds(mlp, seed=0)]

    class Flaky(peers.OrtPeer):
        calls = 0

        def time_once(self, f):
            Flaky.calls += 1
            if Flaky.calls > 2:           # fine while warming up, fails inside the interleaved rounds
                raise RuntimeError("device lost\nsecond line")
            return super().time_once(f)

    def refuses():
        raise ValueError("unsupported operator Foo")

    build = {"ort_default": lambda: peers.OrtPeer(mlp), "refuses": refuses, "flaky": lambda: Flaky(mlp)}
    out = peers.measure(build, feeds, run_cpu(mlp, feeds), rounds=3, warmup=1, settle=0, min_timed_s=0)
    assert out["refuses"]["error"] == "convert/compile: ValueError: unsupported operator Foo"
    assert out["flaky"]["error"] == "timing: RuntimeError: device lost" and out["flaky"]["latency_ms"] is None
    assert out["ort_default"]["error"] is None and len(out["ort_default"]["samples_ms"]) == 3


def test_compare_pools_the_two_ort_default_copies_and_loads_a_run_folder(mlp, tmp_path):
    onnx.save(mlp, tmp_path / "model.onnx")
    (tmp_path / "plan.json").write_text(json.dumps(plan_content()))
    c = ort_baselines.compare(mlp, samples=2, runs=3, warmup=1, run_folder=tmp_path,
                              labels=("ort_default", "ov_f32"))
    assert list(c) == ["ort_default", "ov_f32", "meta_infer"]
    assert c["ort_default"]["aa"] > 0 and "samples_ms" not in c["ort_default"]
    p = c["meta_infer"]["path"]
    assert c["meta_infer"]["error"] is None, c["meta_infer"]
    assert p["loader"] in ("deployable.load_plan", "model.onnx") and p["graph"] == "fp32"   # the deployable loader: when importable


def test_compare_run_uses_the_run_folders_real_inputs_when_given(mlp, tmp_path):
    import numpy as np

    onnx.save(mlp, tmp_path / "default.onnx")
    onnx.save(mlp, tmp_path / "model.onnx")
    (tmp_path / "plan.json").write_text(json.dumps(plan_content()))
    feeds = [random_feeds(mlp, seed=10 + i) for i in range(3)]
    npz = tmp_path / "inputs.npz"
    np.savez(npz, **{k: np.stack([f[k] for f in feeds]) for k in feeds[0]})
    c, n = ort_baselines.compare_run(tmp_path, npz, runs=2, warmup=1, labels=("ort_default",))
    assert n == 3 and list(c) == ["ort_default", "meta_infer"] and c["meta_infer"]["error"] is None
    _, n = ort_baselines.compare_run(tmp_path, None, runs=2, warmup=1, samples=2, labels=("ort_default",))
    assert n == 2                                                    # random inputs, as adapt draws them


def test_a_fast_model_gets_more_rounds(mlp):
    """mlp runs in ~0.1 ms: 3 rounds would time well under the 0.2 s asked, so it gets more (up to 20x)."""
    feeds = [random_feeds(mlp, seed=0)]
    out = peers.measure({"ort_default": lambda: peers.OrtPeer(mlp)}, feeds, run_cpu(mlp, feeds), rounds=3, warmup=1,
                        min_timed_s=0.2)
    assert 3 < len(out["ort_default"]["samples_ms"]) <= 60


def _fake_quantizers(ov_model) -> int:
    return sum(op.get_type_name() == "FakeQuantize" for op in ov_model.get_ops())


def test_accuracy_aware_int8_reverts_layers_to_meet_a_tight_bound(mlp):
    """NNCF's accuracy-aware peer judged by the suite's own loss: with a loose bound it keeps
    plain int8; with a bound tighter than int8's loss it reverts layers to float (within its
    iteration cap) and loses less on the same inputs."""
    from metainfer_core.accuracy.metric import plan_loss

    feeds = [random_feeds(mlp, seed=i) for i in range(4)]
    reference = run_cpu(mlp, feeds)
    loose = peers.nncf_accuracy_aware(peers.ov_read(mlp, feeds[0]), feeds, reference, max_loss=1.0)
    tight = peers.nncf_accuracy_aware(peers.ov_read(mlp, feeds[0]), feeds, reference, max_loss=1e-9)
    assert _fake_quantizers(tight) < _fake_quantizers(loose)
    assert _fake_quantizers(loose) - _fake_quantizers(tight) <= 2 * labels.AAC_ITERATIONS   # the cap holds

    def loss(model):
        p = peers.OpenVinoPeer(model, "f32")
        return plan_loss(reference, [p.run(f) for f in feeds])

    assert 0 < loss(tight) < loss(loose)


def test_compare_times_both_plans_and_a_twin_once(mlp, tmp_path):
    """The suite's two meta-infer columns: each plan timed in its own sessions beside the peers;
    a plan identical to an earlier one (same graph, same path) is one contender, reported twice."""
    int8 = peers.ort_quantized(mlp, None)
    folders = {}
    for name, model in (("balanced", mlp), ("latency", int8), ("latency_again", int8)):
        folders[name] = tmp_path / name
        folders[name].mkdir()
        onnx.save(mlp, folders[name] / "default.onnx")
        onnx.save(model, folders[name] / "model.onnx")
        (folders[name] / "plan.json").write_text(json.dumps(plan_content(decision="adapted", execution_path=None)))
    c = ort_baselines.compare(mlp, samples=2, runs=3, warmup=1, run_folder=folders["latency"],
                              plans={"meta_infer_latency": folders["balanced"], "again": folders["latency_again"]},
                              labels=("ort_default",))
    assert list(c) == ["ort_default", "meta_infer", "meta_infer_latency", "again"]
    assert c["meta_infer"]["path"]["graph"] == "int8" and "same_as" not in c["meta_infer"]
    assert c["meta_infer_latency"]["same_as"] == "ort_default"          # the default artifact itself
    assert c["meta_infer_latency"]["latency_ms"] == c["ort_default"]["latency_ms"]
    assert c["again"]["same_as"] == "meta_infer" and c["again"]["latency_ms"] == c["meta_infer"]["latency_ms"]
    assert all(v["error"] is None for v in c.values()), c


def test_accuracy_aware_int8_is_ended_at_its_time_cap(mlp):
    feeds = [random_feeds(mlp, seed=0)]
    with pytest.raises(TimeoutError, match="ran past 0 s"):
        peers.nncf_accuracy_aware_capped(mlp, feeds, run_cpu(mlp, feeds), 0.01, timeout_s=0.2)
