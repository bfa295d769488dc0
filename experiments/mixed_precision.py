"""Mixed precision where whole-model int8 breaks accuracy.max_loss: per model, side by side in one
interleaved run (bench/peers.py's method: warm runs, rounds interleaved, median; the inputs adapt
got, one reference, plan_loss), each with its speed-up over ONNX Runtime's default and its loss:

  whole int8   meta-infer's int8 action over the whole model in ONNX Runtime's QDQ form (on ORT) and
               in OpenVINO's form (on OpenVINO f32); OpenVINO + NNCF int8 (`nncf.quantize`)
  mixed        (b) the plan `flows/adapt.py target=cpu` chose with the defaults (weights=balanced),
               loaded with metainfer_core.plan.deployable.load_plan; and, per int8 form, the smallest
               `float_layers` choice (k or fit) whose loss on its own path is within the bound (what the
               search's dimension offers, whether or not the search reached it)
  accuracy-aware  `nncf.quantize_with_accuracy_control` (max_drop = --max-loss, absolute, on the
               same metric: 1 - plan_loss per sample), its iterations capped (--ac-iterations)
  engines      the quantizers that could stand behind the int8 action: ORT's `quantize_static`
               (on ORT) and NNCF's ONNX backend (`nncf.quantize` on the ONNX model; on ORT and on
               OpenVINO), beside meta-infer's own QDQ rewrite

    python -m experiments.mixed_precision [--models KEY ...] [--rounds N] [--ac-iterations N]
                                    [--store DIR] [--json PATH] [--skip-adapt]

Models are bench/modelset.py keys (corpus keys get their real inputs as data.inputs; zoo and large
models random inputs, as adapt draws them). Prints one Markdown table; --json writes every figure.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

from bench import modelset, peers
from bench.adapt_run import adapt
from bench.ort_baselines import adapt_feeds, real_feeds
from metainfer_core.accuracy.metric import plan_loss, run_cpu
from metainfer_core.accuracy.sensitivity import Sensitivity
from metainfer_core.actions import ACTIONS, ActionContext, Site, Step, expand
from metainfer_core.actions.float_layers import FIT, FLOAT_LAYERS_DOMAIN, provide_ranking, share_of

ROOT = Path(__file__).resolve().parent.parent

DEFAULT_MODELS = ["basic_pitch_nmp", "silero_vad", "minilm_int8", "unet_nhwc_512"]
FORMS = {"qdq": "inputs_outputs", "ov": "inputs"}      # meta-infer's two int8 forms
INT8 = {"scope": ["compute"], "activation_type": ["QUInt8"], "weight_type": ["QInt8"], "per_channel": ["auto"],
        "calibrate_method": ["MinMax"], "engine": ["metainfer"]}      # NNCF's ONNX engine: its own column


def int8_plans(default: onnx.ModelProto, feeds, reference, form: str, info, max_loss: float) -> dict:
    """{k: (the int8 plan keeping its k most sensitive layers float, those layers)} for every k of
    the declared domain that leaves something to quantize (k = 0: whole-model int8; "fit": as
    many as the estimate needs to be within max_loss), as the search's evaluator ranks them."""
    ctx = ActionContext(target=info, calibration_feeds=feeds)
    sensitivity = Sensitivity(default, feeds, reference, ctx)

    def shares(params, nodes, exact):     # as the search's evaluator measures them (Evaluator.int8_share)
        if not exact:
            return share_of(sensitivity.estimate((Step("int8", Site(nodes, ""), tuple(sorted(params.items()))),)),
                            max_loss)
        peer = on_path(ACTIONS["int8"].apply(default, Site(nodes, ""), params, ctx), feeds, form)
        return share_of(plan_loss(reference, [peer.run(f) for f in feeds]), max_loss)

    # every fixed k (the search offers only those its estimate keeps within the bound), then fit
    out, whole = {}, None
    provide_ranking(ctx.cache, lambda params: sensitivity.table("int8", params))
    for choices in ([k for k in FLOAT_LAYERS_DOMAIN if k != FIT], [FIT]):
        space = {"int8": dict(INT8, placement=[FORMS[form]], float_layers=choices)}
        for action, params, site in expand(default, space, info, cache=ctx.cache):
            whole = whole or site
            out[params["float_layers"]] = (action.apply(default, site, params, ctx),
                                           sorted(set(whole.nodes) - set(site.nodes)))
        provide_ranking(ctx.cache, lambda params: sensitivity.table("int8", params), shares)
    return out


def on_path(model: onnx.ModelProto, feeds, form: str) -> peers.Peer:
    """A plan on the path it runs on: QDQ on ONNX Runtime, OpenVINO's form on OpenVINO f32."""
    return peers.OrtPeer(model) if form == "qdq" else peers.OpenVinoPeer(peers.ov_read(model, feeds[0]), "f32")


def nncf_onnx(default: onnx.ModelProto, feeds) -> onnx.ModelProto:
    """NNCF's ONNX backend: `nncf.quantize` on the ONNX model (QDQ nodes where OpenVINO reads them)."""
    nncf = peers.quiet_nncf()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return nncf.quantize(default, nncf.Dataset(feeds), subset_size=len(feeds))


def nncf_accuracy_control(default: onnx.ModelProto, feeds, reference, max_drop: float, iterations: int):
    """`nncf.quantize_with_accuracy_control` on the OpenVINO model, metric 1 - plan_loss (per sample
    too, as NNCF ranks by it), at most `iterations` layers reverted. Returns (model, seconds)."""
    nncf = peers.quiet_nncf()
    from nncf.quantization.advanced_parameters import AdvancedAccuracyRestorerParameters

    items = list(zip(feeds, reference))

    def validate(compiled, data):
        refs, outs = [], []
        for feed, ref in data:
            res = compiled(feed)
            refs.append(ref)
            outs.append([np.asarray(res[o]) for o in compiled.outputs])
        return 1.0 - float(plan_loss(refs, outs)), [1.0 - float(plan_loss([r], [o])) for r, o in zip(refs, outs)]

    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        model = nncf.quantize_with_accuracy_control(
            peers.ov_read(default, feeds[0]), nncf.Dataset(items, lambda it: it[0]),
            nncf.Dataset(items, lambda it: it[0]), validate, max_drop=max_drop, drop_type=nncf.DropType.ABSOLUTE,
            subset_size=len(feeds),
            advanced_accuracy_restorer_parameters=AdvancedAccuracyRestorerParameters(max_num_iterations=iterations))
    return model, time.perf_counter() - t0


def smallest_within(plans: dict, feeds, reference, form: str, max_loss: float) -> tuple[int | None, dict]:
    """The k with the fewest float layers whose plan's loss on its own path is within max_loss, and every k's loss."""
    losses = {}
    for k, (plan, _) in sorted(plans.items(), key=lambda kv: len(kv[1][1])):     # fewest float layers first
        peer = on_path(plan, feeds, form)
        losses[k] = float(plan_loss(reference, [peer.run(f) for f in feeds]))
        if losses[k] <= max_loss:
            return k, losses
    return None, losses


def default_model(entry) -> onnx.ModelProto:
    """The model as adapt's normalize leaves it (shapes bound), without an adapt run."""
    from metainfer_core import zoo
    from metainfer_core.normalize.loader import load_model
    from metainfer_core.normalize.pipeline import normalize

    if entry.source == "corpus":
        corpus = modelset.bench_corpus.corpus
        return normalize(load_model(entry.path), corpus.bound_shapes(corpus.BY_KEY[entry.key])).model
    return normalize(zoo.build(entry.key, seed=0)).model


def bench_one(entry, args, info, store: Path) -> dict:
    row: dict = {"model": entry.key, "inputs": entry.inputs}
    folder = None
    if not args.skip_adapt:
        t0 = time.perf_counter()
        r = adapt([*entry.args, f"paths.artifacts={store}"], timeout=args.timeout)
        row["adapt"] = {"rc": r["rc"], "wall_s": round(r["wall_s"], 1), "error": r["error"]}
        if r["plan"] is not None:
            folder = Path(r["plan_path"]).parent
            plan = r["plan"]
            row["adapt"] |= {"decision": plan["decision"], "actions": [
                {"kind": a["kind"], "params": a["params"], "n_nodes": len(a.get("nodes", []))} for a in plan["actions"]],
                "execution_path": (plan.get("execution_path") or {}).get("label"),
                "measured_loss": plan["measured"]["accuracy_loss"], "speedup": plan.get("speedup")}
        print(f"[mixed] {entry.key}: adapt {time.perf_counter() - t0:.0f} s, rc {r['rc']}", file=sys.stderr, flush=True)
    if folder is not None:
        default = onnx.load(folder / "default.onnx")
    else:
        default = default_model(entry)
    feeds = real_feeds(default, entry.npz) if entry.npz is not None else adapt_feeds(default, modelset.SAMPLES, 0)
    reference = run_cpu(default, feeds)

    build: dict = {"ort_default": lambda: peers.OrtPeer(default)}
    chosen: dict = {}
    for form in FORMS:
        t0 = time.perf_counter()
        try:
            plans = int8_plans(default, feeds, reference, form, info, args.max_loss)
        except Exception as exc:  # noqa: BLE001 - a form the model cannot take is a result
            row[f"int8_{form}_error"] = peers.short(exc)
            continue
        if 0 in plans:
            build[f"int8_{form}"] = (lambda p, f: lambda: on_path(p, feeds, f))(plans[0][0], form)
        k, losses = smallest_within({k: v for k, v in plans.items() if k != 0}, feeds, reference, form, args.max_loss)
        row[f"mixed_{form}"] = {"losses_by_k": losses, "k": k, "float_layers": plans[k][1] if k else None,
                                "n_float": len(plans[k][1]) if k else None,
                                "fit_n_float": len(plans["fit"][1]) if "fit" in plans else None,
                                "seconds": round(time.perf_counter() - t0, 1)}
        if k is not None:
            chosen[form] = k
            build[f"mixed_{form}"] = (lambda p, f: lambda: on_path(p, feeds, f))(plans[k][0], form)
    build["nncf_int8"] = lambda: peers.OpenVinoPeer(peers.nncf_int8(peers.ov_read(default, feeds[0]), feeds))
    if folder is not None:
        build["adapt"] = lambda: peers.PlanPeer(folder)
    ac: dict = {}

    def accuracy_aware():
        model, seconds = nncf_accuracy_control(default, feeds, reference, args.max_loss, args.ac_iterations)
        ac["seconds"] = round(seconds, 1)
        return peers.OpenVinoPeer(model)

    build["nncf_accuracy_control"] = accuracy_aware
    build["ort_static"] = lambda: peers.OrtPeer(peers.ort_quantized(default, feeds), "int8")
    nncf_graph: list = []

    def nncf_graph_on(runtime):
        if not nncf_graph:
            nncf_graph.append(nncf_onnx(default, feeds))
        return peers.OrtPeer(nncf_graph[0], "int8") if runtime == "ort" else \
            peers.OpenVinoPeer(peers.ov_read(nncf_graph[0], feeds[0]), "f32")

    build["nncf_onnx_on_ort"] = lambda: nncf_graph_on("ort")
    build["nncf_onnx_on_ov"] = lambda: nncf_graph_on("ov")
    build["ort_default_again"] = lambda: peers.OrtPeer(default)     # A/A: the noise floor
    t0 = time.perf_counter()
    results = peers.measure(build, feeds, reference, rounds=args.rounds)
    base = np.median(results["ort_default"].get("samples_ms", []) + results["ort_default_again"].get("samples_ms", []))
    row["peers"] = {k: {"latency_ms": v["latency_ms"], "speedup": (float(base / v["latency_ms"])
                                                                   if v["latency_ms"] else None),
                        "loss": v["accuracy_loss"], "error": v["error"], "path": v["path"]}
                    for k, v in results.items()}
    row["nncf_accuracy_control"] = ac | {"max_num_iterations": args.ac_iterations}
    row["timing_s"] = round(time.perf_counter() - t0, 1)
    print(f"[mixed] {entry.key}: peers {row['timing_s']:.0f} s", file=sys.stderr, flush=True)
    return row


def cell(p: dict | None, max_loss: float) -> str:
    if not p or p.get("speedup") is None:
        return "failed" if p else "–"
    over = " **over**" if p["loss"] is not None and p["loss"] > max_loss else ""
    return f"{p['speedup']:.2f}x ({p['loss']:.1e}){over}"


def table(rows: list[dict], max_loss: float) -> list[str]:
    cols = [("int8_qdq", "whole int8 QDQ (ORT)"), ("int8_ov", "whole int8 OV form (OV f32)"),
            ("nncf_int8", "whole NNCF int8 (OV)"), ("adapt", "adapt's plan (b)"), ("mixed_qdq", "mixed QDQ, fewest float"),
            ("mixed_ov", "mixed OV form, fewest float"), ("nncf_accuracy_control", "NNCF accuracy control (c)"),
            ("ort_static", "ORT quantize_static (ORT)"), ("nncf_onnx_on_ort", "NNCF ONNX graph on ORT"),
            ("nncf_onnx_on_ov", "NNCF ONNX graph on OV f32"), ("ort_default_again", "A/A")]
    out = ["| model | " + " | ".join(c[1] for c in cols) + " | adapt's actions | k (QDQ / OV) |",
           "|---|" + "---|" * (len(cols) + 2)]
    for r in rows:
        ps = r.get("peers", {})
        acts = " + ".join(f"{a['kind']}" + (f"[float_layers={a['params']['float_layers']}]"
                                             if a["params"].get("float_layers") else "")
                          + (f"[{a['params'].get('placement')}]" if a["kind"] == "int8" else "")
                          + (f"[{a['params'].get('runtime')}:{a['params'].get('precision')}]" if a["kind"] == "binding" else "")
                          for a in (r.get("adapt") or {}).get("actions", [])) or "(default)"
        ks = " / ".join(f"{(r.get(f'mixed_{f}') or {}).get('k')} ({(r.get(f'mixed_{f}') or {}).get('n_float')} float)"
                        for f in FORMS)
        out.append(f"| {r['model']} | " + " | ".join(cell(ps.get(c), max_loss) for c, _ in cols) + f" | {acts} | {ks} |")
    return out


def main(argv: list[str]) -> int:
    # the adapts run this checkout's code (an editable install elsewhere would win over a script's folder)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=DEFAULT_MODELS)
    ap.add_argument("--rounds", type=int, default=20, help="interleaved timed rounds")
    ap.add_argument("--ac-iterations", type=int, default=8,
                    help="nncf.quantize_with_accuracy_control's max_num_iterations (layers it may revert)")
    ap.add_argument("--max-loss", type=float, default=0.01, help="accuracy.max_loss (and NNCF's max_drop)")
    ap.add_argument("--timeout", type=float, default=1200.0, help="per adapt")
    ap.add_argument("--store", default=None, help="paths.artifacts of the adapts (default: a temporary folder)")
    ap.add_argument("--skip-adapt", action="store_true", help="no adapt run: (b) left out")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    from app.compose import target_backend

    info = target_backend("cpu").info
    rows = []
    with tempfile.TemporaryDirectory(prefix="metainfer-mixed-") as tmp:
        store = Path(a.store or tmp)
        for entry in modelset.entries(a.models):
            if entry.error:
                rows.append({"model": entry.key, "error": entry.error})
                continue
            try:
                rows.append(bench_one(entry, a, info, store))
            except Exception as exc:  # noqa: BLE001 - one model's failure is a row
                rows.append({"model": entry.key, "error": peers.short(exc, 400)})
                print(f"[mixed] {entry.key}: failed: {exc}", file=sys.stderr, flush=True)
            if a.json:
                Path(a.json).write_text(json.dumps(rows, indent=1, default=str))
    print(f"speed-up over ONNX Runtime's default (accuracy loss); bound {a.max_loss}; "
          f"NNCF accuracy control capped at {a.ac_iterations} iterations")
    print("\n".join(table([r for r in rows if "peers" in r], a.max_loss)))
    for r in rows:
        if "error" in r:
            print(f"{r['model']}: failed: {r['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
