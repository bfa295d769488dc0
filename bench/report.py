"""The suite's Markdown report and the README results block, rendered from the suite's
results dict (results.json): plain functions, no measuring here, so they are tested alone."""
from __future__ import annotations

import re

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def _f(x, fmt: str = ".3g", none: str = "–") -> str:
    return none if x is None else format(x, fmt)


def _ratio(a, b) -> float | None:
    return a / b if a and b else None


def _x(r) -> str:
    return "–" if r is None else f"{r:.2f}x"


def speedup_row(m: dict) -> str:
    t = m["timings"]
    return (f"| {m['name']} | {m['nodes']} | {_f(m['default_ms'], '.4g')} | {_f(m['adapted_ms'], '.4g')} "
            f"| **{_x(_ratio(m['default_ms'], m['adapted_ms']))}** | {_f(m['accuracy_loss'], '.2e')} | {m['decision']} "
            f"| {', '.join(m['actions']) or '-'} | {t.get('search_s', 0):.1f} / {t.get('compile_s', 0):.2f} / "
            f"{t.get('verify_s', 0):.1f} | {t.get('total_s', 0):.0f} | `{m['run_folder']}` | `{m['mlflow_run_id']}` "
            f"| {m.get('mlflow_check', '–')} |")


def compare_row(m: dict) -> str:
    c = m.get("compare") or {}
    base = (c.get("default") or {}).get("latency_ms")
    cells = []
    for k in ("meta_infer", "ort_static", "ort_dynamic"):
        v = c.get(k) or {}
        if v.get("error"):
            cells.append(f"failed ({v['error'][:60]})")
        else:
            same = " (= default)" if k == "meta_infer" and m.get("plan_is_default") else ""
            cells.append(f"{_f(v.get('latency_ms'), '.4g')} ms, {_x(_ratio(base, v.get('latency_ms')))}, "
                         f"loss {_f(v.get('accuracy_loss'), '.1e')}{same}")
    aa = (c.get("default") or {}).get("aa")
    return f"| {m['name']} | {_f(base, '.4g')} | {_x(aa)} | " + " | ".join(cells) + " |"


def roofline_row(m: dict) -> str:
    r = m["roofline"]
    return (f"| {m['name']} | {r['gflops']:.3g} | {r['mbytes']:.3g} | {r['precision']} | {r['bound']} "
            f"| {r['limit_ms']:.3g} | {_f(m['adapted_ms'], '.4g')} | **{r['x_limit']:.3g}x** |")


def headline(results: dict) -> dict:
    """Geometric means over the models that ran: adapted vs default, and each ORT quantizer
    vs default (same comparison run), plus the median distance to the roofline."""
    import math

    def gmean(xs):
        xs = [x for x in xs if x and math.isfinite(x)]
        return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None

    ok = [m for m in results["models"] if not m.get("error")]
    out = {"models": len(ok), "failed": len(results["models"]) - len(ok),
           "adapted": sum(1 for m in ok if m["decision"] == "adapted"),
           "speedup_gmean": gmean([_ratio(m["default_ms"], m["adapted_ms"]) for m in ok])}
    for k in ("meta_infer", "ort_static", "ort_dynamic"):
        out[f"{k}_gmean"] = gmean([_ratio((m.get("compare") or {}).get("default", {}).get("latency_ms"),
                                          (m.get("compare") or {}).get(k, {}).get("latency_ms")) for m in ok])
    out["aa_gmean"] = gmean([(m.get("compare") or {}).get("default", {}).get("aa") for m in ok])
    xs = sorted(m["roofline"]["x_limit"] for m in ok if m.get("roofline"))
    out["roofline_x_median"] = xs[len(xs) // 2] if xs else None
    return out


def markdown(results: dict) -> str:
    h = headline(results)
    mach = results["machine"]
    lines = [f"# meta-infer benchmark report ({results['date']})", "",
             f"Machine: {mach['cpu']}, {mach['cores']} cores ({mach['load']}), onnxruntime {mach['onnxruntime']}; "
             f"target `cpu` (**measured**, 1 intra-op thread). Suite options: `{results['options']}`; wall time "
             f"{results['wall_s'] / 60:.1f} min. Every ratio below compares figures measured side by side in this run.",
             "", "## Headline", "",
             f"- adapted vs default (adapt's own verify, geometric mean over {h['models']} models): "
             f"**{_x(h['speedup_gmean'])}**; {h['adapted']} adapted, {h['models'] - h['adapted']} kept the default"
             + (f"; {h['failed']} failed" if h["failed"] else ""),
             f"- same-run comparison vs default (geometric mean): meta-infer {_x(h['meta_infer_gmean'])}, "
             f"ORT quantize_static {_x(h['ort_static_gmean'])}, ORT quantize_dynamic {_x(h['ort_dynamic_gmean'])} "
             f"(A/A noise floor {_x(h['aa_gmean'])})",
             f"- adapted latency / roofline limit (median): {_f(h['roofline_x_median'], '.3g')}x", ""]
    lines += ["## Adapted vs default on `cpu`", "",
              "From each run's plan.json (`baseline` = default plan, `measured` = chosen plan, timed interleaved in "
              "the same verify); `mlflow` says whether the MLflow run holds the same figures.", "",
              "| model | nodes | default ms | adapted ms | speed-up | accuracy loss | decision | actions "
              "| search / compile / verify s | adapt total s | run folder | MLflow run | mlflow |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in results["models"]:
        lines.append(f"| {m['name']} | failed: {m['error'][:150]} |||||||||||" if m.get("error") else speedup_row(m))
    lines += ["", "## Against what a user would try instead", "",
              "The default plan (`default.onnx` of the run), meta-infer's plan (`model.onnx`) and ONNX Runtime's "
              "`quantize_static` (defaults: QDQ, QInt8/QInt8, MinMax, per-tensor; calibrated on the same inputs) and "
              "`quantize_dynamic` (defaults) of the default plan, timed together with verify's method (interleaved "
              f"runs, {results['options'].get('compare_runs')} each). Cells: median latency, speed-up vs default, "
              "accuracy loss (1 − cosine, worst case). Each round starts at the next plan; the default is loaded "
              "first and last and its figure pools both copies; A/A is the first copy against the second (noise "
              "floor: a ratio that close to 1.00x means nothing). `(= default)`: adapt rolled back or kept the "
              "default, so meta-infer's plan is the default model byte for byte and its ratio is noise too.", "",
              "| model | default ms | A/A | meta-infer | ORT quantize_static | ORT quantize_dynamic |",
              "|---|---|---|---|---|---|"]
    lines += [compare_row(m) for m in results["models"] if not m.get("error")]
    p = results.get("peaks")
    if p:
        lines += ["", "## Roofline reference", "",
                  f"Measured in this run with ONNX Runtime, 1 thread (best of a measurement at the start and one at "
                  f"the end): fp32 MatMul {p['fp32_gflops']:.1f} GFLOP/s, int8 MatMulInteger {p['int8_gops']:.1f} GOP/s, "
                  f"memory bandwidth {p['cache_bandwidth_gbs']:.1f} GB/s inside the {p['cache_bytes'] >> 10} KiB per-core "
                  f"cache (a chain of Adds) and {p['bandwidth_gbs']:.1f} GB/s over 64 MiB arrays. Limit = max(FLOPs / "
                  "peak, compulsory bytes (weights + inputs + outputs) / bandwidth at that footprint), with the int8 peak "
                  "and int8 weights for a plan with an int8 action. It is a lower bound on latency (peaks are the best "
                  "of many runs of a large kernel; real layers are smaller and pay per-node overhead), so the multiple "
                  "is an upper bound on what any plan could still gain.", "",
                  "| model | GFLOP | MB | plan precision | bound | limit ms | adapted ms | adapted / limit |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [roofline_row(m) for m in results["models"] if m.get("roofline")]
    lines += _predictor(results.get("predictor")) + _scaling(results.get("search_scaling")) \
        + _reprofile(results.get("reprofile")) + _mlflow(results.get("mlflow"))
    plots = results.get("plots") or []
    if plots:
        lines += ["", "## Plots", ""] + [f"![{n}]({n})" for n in plots]
    return "\n".join(lines) + "\n"


def _predictor(p: dict | None) -> list[str]:
    if not p:
        return []
    if p.get("error"):
        return ["", "## Predictor accuracy", "", f"failed: {p['error']}"]
    m = p["metrics"]
    return ["", "## Predictor accuracy (leave-one-model-out on the zoo, `cpu`)", "",
            f"bench/predictor.py's run_target: {m['models']} models, {m['plans']} candidate plans; build "
            f"{p['build_s']:.0f} s, validate {p['lomo_s']:.0f} s. The adapt runs' own predicted vs measured latencies "
            "are in the plot below.", "",
            "| MAPE | within ±10 % | mean Spearman | default-plan MAPE | kernel MAPE |", "|---|---|---|---|---|",
            f"| {m['mape']:.1%} | {m['within_10']:.0%} | {m['spearman_mean']:.3f} | {m['default_mape']:.1%} "
            f"| {m['kernel_mape']:.1%} |"]


def _scaling(rows: list | None) -> list[str]:
    if not rows:
        return []
    first = rows[0]
    out = ["", f"## Search scaling (bench/search_scaling.py, modeled `{first['target']}`, beam {first['beam']}, "
               f"depth {first['depth']})", "",
           "| nodes | search s | candidates | s per candidate | time vs smallest |", "|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['nodes']} | {r['search_s']:.1f} | {r['evaluated']} | {r['search_s'] / max(r['evaluated'], 1):.3f} "
                   f"| {_x(_ratio(r['search_s'], first['search_s']))} |")
    return out


def _reprofile(rows: list | None) -> list[str]:
    if not rows:
        return []
    out = ["", "## Re-profiling cost (bench/reprofile_cost.py)", "",
           "| target | full profile s (kernels) | no drift s | ratio | new version | re-profile s (drifted) "
           "| re-measured / carried | ratio |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        q, d = r["quiet"], r.get("drift")
        kind = " (modeled)" if r["target"] != "cpu" else " (measured)"
        out.append(f"| {r['target']}{kind} | {r['full_s']:.1f} ({r['full_kernels']}) | {q['seconds']:.2f} "
                   f"| {_x(_ratio(q['seconds'], r['full_s']))} | "
                   + (f"{r.get('change', '–')} | {d['seconds']:.2f} ({', '.join(d['drifted']) or 'none'}) "
                      f"| {d['remeasured']} / {d['carried']} | {_x(_ratio(d['seconds'], r['full_s']))} |"
                      if d else "– | – | – | – |"))
    return out


def _mlflow(m: dict | None) -> list[str]:
    if not m:
        return []
    out = ["", "## MLflow", "", f"Store `{m['uri']}`; one experiment per (model, target). Open it with "
           f"`mlflow ui --backend-store-uri {m['uri']}` and compare the runs of an experiment.", "",
           "| experiment | runs | params / metrics of this run | aligned with the other runs |", "|---|---|---|---|"]
    for e in m["experiments"]:
        out.append(f"| {e['name']} | {e['runs']} | {e['params']} / {e['metrics']} | "
                   f"{'yes' if not e['differs'] else 'differs: ' + ', '.join(e['differs'][:6])} |")
    return out


def readme_block(results: dict, report_path: str) -> str:
    """The compact table that goes between the README markers."""
    h = headline(results)
    lines = [BEGIN, f"Last run {results['date']} on {results['machine']['cpu']} ({results['machine']['cores']} cores, "
             f"shared: {results['machine']['load']}), `{results['command']}`, {results['wall_s'] / 60:.1f} min; "
             f"full report `{report_path}`. Target `cpu` (measured, 1 thread).", "",
             "| model | default ms | adapted ms | speed-up | accuracy loss | decision | ORT static | ORT dynamic "
             "| A/A | adapted / roofline |", "|---|---|---|---|---|---|---|---|---|---|"]
    for m in results["models"]:
        if m.get("error"):
            lines.append(f"| {m['name']} | failed |||||||")
            continue
        c = m.get("compare") or {}
        base = (c.get("default") or {}).get("latency_ms")
        ort = [_x(_ratio(base, (c.get(k) or {}).get("latency_ms"))) + f" ({_f((c.get(k) or {}).get('accuracy_loss'), '.0e')})"
               for k in ("ort_static", "ort_dynamic")]
        lines.append(f"| {m['name']} | {_f(m['default_ms'], '.3g')} | {_f(m['adapted_ms'], '.3g')} "
                     f"| {_x(_ratio(m['default_ms'], m['adapted_ms']))} | {_f(m['accuracy_loss'], '.1e')} "
                     f"| {m['decision']} | {ort[0]} | {ort[1]} | {_x((c.get('default') or {}).get('aa'))} "
                     f"| {_f((m.get('roofline') or {}).get('x_limit'), '.3g')}x |")
    lines += ["", f"Geometric-mean speed-up {_x(h['speedup_gmean'])} (meta-infer, adapt's verify); in the suite's "
                  f"own interleaved comparison meta-infer {_x(h['meta_infer_gmean'])}, ORT static "
                  f"{_x(h['ort_static_gmean'])}, ORT dynamic {_x(h['ort_dynamic_gmean'])}, default against itself "
                  f"(A/A noise floor) {_x(h['aa_gmean'])}. ORT columns: speed-up vs the default, accuracy loss in "
                  "brackets.", END]
    return "\n".join(lines)


def replace_block(text: str, block: str) -> str:
    """Swap the marked block for `block`; the markers must appear once each, in order."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"README must hold exactly one {BEGIN} ... {END} block (found {text.count(BEGIN)} begin and "
                         f"{text.count(END)} end markers); restore the Benchmarks section's markers and rerun.")
    return re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _: block, text, count=1, flags=re.S)
