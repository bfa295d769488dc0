"""What a person reads of a run: the terminal summary and plan.md rendered from plan.json
(metainfer_core.plan.report), and the warnings for problems a run would otherwise keep quiet
about (metainfer_core.plan.run_warnings). The adapt flow's own output is checked end to end in
test_flow_adapt.py."""
from __future__ import annotations

import json

from metainfer_core.actions import ACTIONS
from metainfer_core.plan.plan_file import read_plan
from metainfer_core.plan.record import silent_problems, write_plan
from metainfer_core.plan.plots import write_plots
from metainfer_core.plan.report import action_name, action_words, plan_markdown, plan_name, summary_text
from metainfer_core.plan.schema import Plan
from metainfer_core.plan.run_warnings import default_memory, predictor_error
from metainfer_core.search.candidate import Candidate
from metainfer_core.backends import backend_for
from metainfer_core.search.stage import SearchOutcome
from metainfer_core.verify.stage import VerifyOutcome
from metainfer_core.verify import Verified
from metainfer_core.zoo import build
from plan_content import metrics, plan_content


def test_every_action_is_put_in_words():
    for kind, action in ACTIONS.items():
        step = {"kind": kind, "nodes": [], "scope": "all", "params": action.with_defaults({})}
        words, name = action_words(step), action_name(step)
        assert not words.startswith(kind) and "None" not in words and "None" not in name, (kind, words, name)
    step = {"kind": "teleport", "nodes": ["a"], "scope": "all", "params": {"speed": 3}}
    assert action_words(step) == "teleport (speed=3)"          # an extension's action: its kind and params
    assert plan_name([]) == "default (unchanged)"


def _step(kind: str, **params) -> dict:
    return {"kind": kind, "nodes": [f"Conv_{i}" for i in range(7)], "scope": params.get("scope", "all"),
            "params": ACTIONS[kind].with_defaults(params)}


ROLLED_BACK = {
    "model": {"name": "net", "source": "file:net.onnx", "sha256": "0" * 64},
    "target": {"name": "cpu", "measurement": "measured", "firmware": "x86", "driver": "-", "runtime": "ort",
               "memory_budget_bytes": 2**30},
    "decision": "rolled_back", "accuracy_bound": 0.01, "actions": [],
    "reason": "candidate1 loses 0.2 accuracy (bound 0.01); candidate2 pays (1.10x) but scores 0.95",
    "predicted": {"latency_ms": 2.0, "peak_mem_bytes": 3 * 2**20, "accuracy_loss": 0.0},
    "measured": {"latency_ms": 2.1, "p90_ms": 2.3, "peak_mem_bytes": 3 * 2**20, "accuracy_loss": 0.0},
    "baseline": {"latency_ms": 2.1, "p90_ms": 2.3, "peak_mem_bytes": 3 * 2**20, "accuracy_loss": 0.0,
                 "compile_s": 0.1, "predicted_latency_ms": 2.0, "predicted_peak_mem_bytes": 3 * 2**20},
    "candidates": [
        {"label": "candidate1", "actions": [_step("int8")], "predicted_latency_ms": 1.0,
         "measured": {"latency_ms": 1.2, "peak_mem_bytes": 2**20, "accuracy_loss": 0.2},
         "verdict": "loses 0.2 accuracy (bound 0.01)", "error": None},
        {"label": "candidate2", "actions": [_step("layout"), _step("fuse_chain")], "predicted_latency_ms": 1.8,
         "measured": {"latency_ms": 1.9}, "verdict": None, "error": "RuntimeError: no kernel"},
    ],
    "warnings": ["predictor: off by more than 2x"],
    "timings": {"normalize_s": 0.1, "profile_s": 3.0, "search_s": 1.0, "verify_s": 2.0, "total_s": 6.5},
    "budget": {"total_s": 240.0, "allowed_s": {"profile": 70.0}},
}


def test_summary_of_a_rolled_back_plan():
    text = summary_text(ROLLED_BACK, "runs/x/plan.md")
    assert text.splitlines()[0] == "net on cpu (measured): rolled_back - default (unchanged)"
    assert "kept" in text.splitlines()[2] and "same" in text           # the default kept: no gain claimed
    assert "candidate1 (int8 u8s8) loses" in text and "candidate2 (NHWC + fused epilogues) pays" in text
    assert "WARNING: predictor: off by more than 2x" in text and text.endswith("report: runs/x/plan.md")
    assert "profile 3.0 s" in text and "(budget 240 s)" in text


def test_markdown_of_a_rolled_back_plan():
    md = plan_markdown(ROLLED_BACK)
    assert md.startswith("# net on cpu (measured): rolled_back")
    assert "Nothing: the model runs as the default plan" in md
    rows = [ln for ln in md.splitlines() if ln.startswith("| candidate")]
    # the memory each plan adds (here: saves), as a share of the target's memory budget
    assert rows[0].startswith("| candidate1 | int8 u8s8 | 1 | 1.2 | - | 1 MiB | -2 MiB (-0.20% of 1 GiB) | 0.2 | loses 0.2")
    assert rows[1].endswith("| failed: RuntimeError: no kernel |")
    assert "- predictor: off by more than 2x" in md and "| profile | 3.00 | 70 |" in md


def test_adapted_plan_says_what_changed_where():
    plan = dict(ROLLED_BACK, decision="adapted", actions=[_step("int8", scope="compute"), _step("tiling")],
                measured={"latency_ms": 1.05, "peak_mem_bytes": 2**20, "accuracy_loss": 0.004}, warnings=[])
    text, md = summary_text(plan), plan_markdown(plan)
    assert text.splitlines()[0] == "net on cpu (measured): adapted, 2.00x faster - int8 u8s8 + 4 height tiles"
    assert "2.00x faster" in text and "-67%" in text and "0.004" in text
    assert "| 1 | int8 | quantize to int8" in md
    assert "7 nodes (Conv/MatMul/Gemm): Conv_0, Conv_1, Conv_2, Conv_3, ..." in md
    assert "| 2 | tiling | run the chain as 4 executions on tiles split along the height |" in md
    assert "## Warnings\n\nNone." in md


def test_a_modeled_plan_says_its_latencies_are_simulated():
    modeled = dict(ROLLED_BACK, target=dict(ROLLED_BACK["target"], name="npu", measurement="modeled",
                                            note="latencies are simulated by the target's spec model"))
    assert "note: latencies are simulated by the target's spec model" in summary_text(modeled)
    assert "simulated" not in summary_text(ROLLED_BACK)


def test_default_memory_warning():
    assert default_memory(900, 1000, None, True) is None
    w = default_memory(3 * 2**20, 2**20, 512 * 2**10, True)
    assert w.startswith("memory: the default plan needs 3 MiB (measured peak), over the device's 1 MiB")
    assert w.endswith("the chosen plan needs 512 KiB and fits")
    assert "keeps the default, which does not fit" in default_memory(3 * 2**20, 2**20, None, False)


def test_predictor_error_warning():
    assert predictor_error([("default", 3.0, 3.1), ("candidate1", 1.0, 1.9)]) is None
    w = predictor_error([("default", 3.0, 3.1), ("candidate1", 5.4, 10.3), ("candidate2", 5.4, 35.4)])
    assert w.startswith("predictor: off by more than 2x on 1 of the 3 plans")
    assert "candidate2 predicted 5.4 ms, measured 35.4 ms, 6.6x" in w
    assert predictor_error([("candidate1", float("nan"), 2.0), ("candidate2", 1.0, None)]) is None


def test_plan_warnings_from_the_stage_outputs(settings_for):
    """The npu's 96 KiB cannot hold resnet_tiny's default; a candidate predicted 4x too fast."""
    info = backend_for(settings_for("target=npu")).info
    model = build("mlp")
    default = Candidate(model, latency_ms=2.0, peak_mem_bytes=704 * 2**10)
    plan = Candidate(model, latency_ms=0.5, peak_mem_bytes=64 * 2**10)
    verified = VerifyOutcome(Verified("default", 2.1, 2.2, 704 * 2**10, 0.0),
                             [Verified("candidate1", 2.0, 2.1, 64 * 2**10, 0.001)], [plan], [], 0.0)
    warnings = silent_problems(info, SearchOutcome(None, default=default), verified,
                               {"peak_mem_bytes": 64 * 2**10})
    assert len(warnings) == 2
    assert warnings[0].startswith("memory: the default plan needs 704 KiB (measured peak)")
    assert warnings[0].endswith("the chosen plan needs 64 KiB and fits")
    assert "candidate1 predicted 0.5 ms, measured 2 ms, 4.0x" in warnings[1]
    fits = SearchOutcome(None, default=Candidate(model, latency_ms=1.0, peak_mem_bytes=2**10))
    assert silent_problems(info, fits, None, None) == []


def test_plots_of_a_plan(tmp_path):
    written = write_plots(ROLLED_BACK, tmp_path)
    assert [f for _, f in written] == ["latency_vs_loss.png", "predicted_vs_measured.png"]
    assert all((tmp_path / f).read_bytes().startswith(b"\x89PNG") for _, f in written)
    md = plan_markdown(ROLLED_BACK, written)
    assert "![Latency vs accuracy loss](latency_vs_loss.png)" in md


def test_plan_json_keeps_the_per_node_lists_in_its_side_file(tmp_path):
    host = [{"kernel": "Cast", "nodes": [f"x{i}|to_fp16"], "reason": "op Cast is not in the device op set"}
            for i in range(5)]
    candidates = [{**c, "measured": metrics(**c["measured"]), "binding": {"device": 3, "host": host}}
                  for c in ROLLED_BACK["candidates"]]
    plan = plan_content(**{**ROLLED_BACK, "actions": [_step("fp16")], "candidates": candidates,    # as read_plan
                           "measured": metrics(**ROLLED_BACK["measured"]),                        # wants it
                           "predicted": {"score": 1.0, **ROLLED_BACK["predicted"]}})
    write_plan(tmp_path, Plan.of(plan))
    text = (tmp_path / "plan.json").read_text()
    stored = json.loads(text)
    assert stored["node_lists"] == "plan_nodes.json" and (tmp_path / "plan_nodes.json").is_file()
    assert "Conv_3" not in text.split('"candidates"')[1] and "to_fp16" not in text       # only in the side file
    assert stored["candidates"][1]["actions"][1]["n_nodes"] == 7 and stored["candidates"][0]["binding"] == {
        "device": 3, "host_kernels": 5}
    assert stored["actions"] == plan["actions"] and '"nodes": ["Conv_0", "Conv_1", ' in text     # on one line
    assert read_plan(tmp_path).to_dict() == plan and read_plan(tmp_path / "plan.json").to_dict() == plan
    assert plan_markdown(stored) == plan_markdown(plan)          # plan.md reads the same from either


def test_a_mixed_precision_step_says_how_many_layers_stay_float():
    mixed = {"kind": "int8", "params": dict(ACTIONS["int8"].with_defaults({}), float_layers=2)}
    whole = {"kind": "int8", "params": ACTIONS["int8"].with_defaults({})}
    assert action_name(mixed) == "int8 u8s8, 2 layers float" and action_name(whole) == "int8 u8s8"
    assert "2 layers most sensitive to int8 kept in float" in action_words(mixed)
    assert "float (mixed" not in action_words(whole)
    fit = dict(mixed, params=dict(mixed["params"], float_layers="fit"), scope="compute, 17 float")
    assert action_name(fit) == "int8 u8s8, 17 layers float"


def test_int8_plans_are_told_apart_by_who_wrote_them_and_what_they_quantize():
    base = ACTIONS["int8"].with_defaults({})
    name = lambda **kw: action_name({"kind": "int8", "params": dict(base, **kw)})  # noqa: E731
    assert name(engine="onnxruntime") == "int8 u8s8 (ORT quantizer)"
    assert name(scope="all") == "int8 u8s8 (all ops)"
    assert name(placement="inputs", engine="nncf") == "int8 OpenVINO form (NNCF)"
    assert len({name(), name(engine="onnxruntime"), name(scope="all")}) == 3
    assert "written by ONNX Runtime's quantize_static" in action_words({"kind": "int8", "params": dict(base, engine="onnxruntime")})


def test_the_search_line_says_why_it_stopped_short_of_its_depth():
    from metainfer_core.plan.report import search_text

    assert search_text({"levels": 4, "depth": 4, "evaluated": 9}) == "depth 4 of 4 reached, 9 candidates scored"
    assert search_text({"levels": 2, "depth": 4, "evaluated": 9, "stopped_by_budget": True}).endswith(
        "stopped by the budget")
    assert "action space ends there" in search_text({"levels": 2, "depth": 4, "evaluated": 9})


def test_held_out_and_calibration_losses_and_the_confirmed_latencies_are_shown():
    plan = json.loads(json.dumps(ROLLED_BACK))
    plan["accuracy_samples"] = {"calibration": 8, "judging": 4, "judged_on": "every 3rd sample of data.inputs, held out"}
    plan["candidates"][0]["measured"]["calibration_loss"] = 0.004
    plan["baseline"]["calibration_loss"] = 0.0
    md = plan_markdown(plan)
    assert "| accuracy loss, 4 held-out samples | 0 | 0 | bound 0.01 |" in md
    assert "| accuracy loss, 8 calibration samples | 0 |" in md
    assert "| 0.2 (calibration 0.004) |" in md                 # the candidates table: both losses
    assert "judged on 4 samples (every 3rd sample of data.inputs, held out)" in md
    assert "Latencies: verify's interleaved rounds." in md
    plan["default_alone"] = {"label": "default", "pays": True, "rounds": 90, "isolated": True,
                             "process_speedups": [1.0, 0.99, 1.01, 1.0, 1.0], "default_ms": 2.0}
    assert "Latency: the default timed alone in 5 fresh processes, pooled, 90 rounds" in plan_markdown(plan)

    plan.update(decision="adapted", actions=[_step("int8")])
    plan["candidates"][0]["verdict"] = "chosen: 1.25x"
    plan["confirmations"] = [{"label": "candidate1", "pays": True, "rounds": 120, "isolated": True, "ratio": 0.8,
                              "ratio_low": 0.79, "ratio_high": 0.81, "default_ms": 2.0, "plan_ms": 1.6}]
    text = summary_text(plan)
    assert "timed alone together in a process of its own, 120 alternating rounds (paired ratio 0.800" in text

    plan.pop("accuracy_samples")       # a plan judged on its calibration samples: one loss row
    assert "| accuracy loss | 0 | 0 | bound 0.01 |" in plan_markdown(plan)


def test_a_plan_served_under_load_shows_every_setting_and_the_one_chosen():
    def row(label, setting, described, per_s, p99, holds, error=None):
        return {"label": label, "setting": setting, "described": described, "holds_bound": holds, "error": error,
                "throughput_per_s": per_s, "requests": 100, "seconds": 1.0, "p50_ms": p99 / 2, "p90_ms": p99 * 0.8,
                "p99_ms": p99} | ({} if error else {"score": 500 / per_s + p99 / 5.0})

    measured = [row("default", {"sessions": 1, "intra_op_threads": 2}, "1 session, 2 threads", 400, 9.0, False),
                row("default", {"sessions": 2, "intra_op_threads": 1}, "2 sessions, 1 thread each", 500, 5.0, True),
                row("c1", {"sessions": 2, "intra_op_threads": 1}, "2 sessions, 1 thread each", 700, 4.0, True),
                row("c1", {"sessions": 1, "intra_op_threads": 2}, "1 session, 2 threads", 0, 0, False, "Boom: no")]
    serving = {"mode": "throughput", "cores": 2, "concurrency": 2, "request_threads": 1, "percentile": 99,
               "bound_ms": 6.0, "setting": measured[2]["setting"], "plan": measured[2], "default": measured[1],
               "keeps_plan": True, "reason": "under the load the plan serves 1.40x the default's requests",
               "measured": measured, "weights": {"latency": 1.0, "throughput": 1.0},
               "confirmation": {"pays": True, "seconds_each": 4.0, "processes": 3,
                                "plan": measured[2] | {"throughput_per_s": 690},
                                "default": measured[1] | {"throughput_per_s": 505}}}
    plan = Plan.of(plan_content(serving=serving)).to_dict()
    assert "serving: 2 requests at once on 2 cores: 700/s, p99 4 ms (2 sessions, 1 thread each); p99 bound 6 ms" \
        in summary_text(plan)
    md = plan_markdown(plan)
    assert "## Served under load" in md and "| default | 1 session, 2 threads | 400 | 4.5 | 9 | no | 3.050 |" in md
    assert "weighs the p90 latency by 1 and the requests per second by 1" in md
    assert "Served again alone with the default in fresh processes (4 s each over 3 processes, pooled): the plan " \
        "690/s" in md and "holds." in md
    assert "| c1 | 1 session, 2 threads | failed: Boom: no |" in md and "1.40x the default's requests" in md
    one = Plan.of(plan_content(serving={"mode": "latency", "cores": 1, "concurrency": 1, "request_threads": 1})).to_dict()
    assert "serving: one request at a time, 1 thread (serving=latency)" in summary_text(one)
    assert "Served under load" not in plan_markdown(one)
