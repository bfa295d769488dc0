"""The suite's Markdown report and the results block of docs/benchmarks.md, rendered from the suite's
results dict (results.json): plain functions, no measuring here, so they are tested alone. The
figures the tables show (ratios, geometric means, the goal) are bench/goals.py's."""
from __future__ import annotations

import re

from bench import plan_predictions
from bench.clean_check import DEFAULT_WITHIN, HOLDS, LOSSY_MIN
from bench.goals import (COLUMNS, GOAL, base_ms, compare_ratios, fastest_peer, gmean, goal, goal_summary,
                         headline, max_loss, ratio)
from bench.labels import AAC_ITERATIONS, AAC_RANKING_SUBSET, AAC_TIMEOUT_S, NAMES, PEERS
from metainfer_core.plan.report import search_text

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def _f(x, fmt: str = ".3g", none: str = "–") -> str:
    return none if x is None else format(x, fmt)


def _x(r) -> str:
    return "–" if r is None else f"{r:.2f}x"


SOURCES = {"zoo": "zoo", "large": "zoo, large", "ppocr": "PP-OCR", "corpus": "corpus"}


def first_line(text: str | None, limit: int = 150) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return (lines[0] if lines else "(no message)")[:limit]


def _source(m: dict) -> str:
    src = SOURCES.get(m.get("source"), m.get("source") or "–")
    return src + (", real inputs" if m.get("inputs") == "data.inputs" else "")


def stage_seconds(timings: dict | None) -> str:
    """plan.json `timings` as 'normalize 0.3, profile 3.4, ..., total 15.2' (seconds)."""
    return ", ".join(f"{k.removesuffix('_s')} {v:.1f}" for k, v in (timings or {}).items()
                     if isinstance(v, (int, float))) or "–"


def _failed(m: dict) -> str:
    rc = m.get("rc")
    why = "not fetched" if rc == "fetch" else "timed out" if rc == "timeout" else f"exit {rc}" if rc is not None else ""
    return f"failed ({why})" if why else "failed"


def adapt_table(models: list[dict], links: bool = True) -> list[str]:
    """Per model: source, exit code, decision, adapted vs default (adapt's own verify), accuracy
    loss, actions, execution path, adapt wall time and each stage's seconds (plan.json `timings`);
    with `links`, the run folder and MLflow run too."""
    head = ["model", "source", "exit", "nodes", "default ms", "adapted ms", "speed-up", "accuracy loss", "decision",
            "actions", "execution path", "adapt s", "stage seconds", "search depth",
            "weights=latency: speed-up, decision, actions"] \
        + (["run folder", "MLflow run", "mlflow"] if links else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in models:
        if m.get("error"):
            cells = [m["name"], _source(m), str(m.get("rc", "–")), "", "", "", "", "",
                     f"{_failed(m)}: {first_line(m['error'])}", "", "", _f(m.get("adapt_s"), ".0f"), "", "", ""]
        else:
            cells = [m["name"], _source(m), str(m.get("rc", 0)), str(m["nodes"]), _f(m["default_ms"], ".4g"),
                     _f(m["adapted_ms"], ".4g"), f"**{_x(ratio(m['default_ms'], m['adapted_ms']))}**",
                     _f(m["accuracy_loss"], ".2e"), m["decision"], ", ".join(m["actions"]) or "-",
                     m.get("execution_path") or "–", _f(m.get("adapt_s"), ".0f"), stage_seconds(m.get("timings")),
                     search_text(m["search"]) if m.get("search") else "–", latency_cell(m)]
        if links:
            cells += ["", "", ""] if m.get("error") else [f"`{m['run_folder']}`", f"`{m['mlflow_run_id']}`",
                                                         str(m.get("mlflow_check", "–"))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _yn(v) -> str:
    return "–" if v is None else "yes" if v else "**no**"


def _plan_cell(c: dict) -> str:
    """The chosen plan in a few words: its execution path and actions, lossy or not."""
    if not c.get("adopted"):
        return "default kept"
    acts = ", ".join(a for a in c.get("actions") or [] if a) or "-"
    loss = c.get("accuracy_loss")
    return (f"{c.get('execution_path') or '–'}: {acts}"
            + (f" (lossy, {loss:.1e})" if c.get("lossy") and loss is not None else " (lossless)"))


def clean_summary(models: list[dict]) -> dict:
    """The clean check over the rows (issue 47): {adopted (adopted plans checked), holds (of them,
    clean speed-up within 3 % of the claim), lossy, lossy_under (lossy adopted plans under 1.03x
    clean), checked (runs whose default was timed), defaults_within (plan.json's default within
    10 % of the clean one), errors (checks that failed)}."""
    cs = [m["clean"] for m in models if not m.get("error") and m.get("clean")]
    ok = [c for c in cs if not c.get("error")]
    adopted = [c for c in ok if c.get("adopted")]
    return {"adopted": len(adopted), "holds": sum(1 for c in adopted if c.get("holds")),
            "lossy": sum(1 for c in adopted if c.get("lossy")),
            "lossy_under": sum(1 for c in adopted if c.get("lossy") and c.get("lossy_ok") is False),
            "checked": len(ok), "defaults_within": sum(1 for c in ok if c.get("default_holds")),
            "errors": len(cs) - len(ok)}


def clean_line(models: list[dict]) -> str:
    s = clean_summary(models)
    return (f"**{s['holds']} of {s['adopted']} adopted plans hold within {HOLDS:.0%}** (clean speed-up against "
            f"plan.json's claim); lossy plans adopted under {LOSSY_MIN:g}x clean: {s['lossy_under']} (of "
            f"{s['lossy']} lossy); plan.json's default within {DEFAULT_WITHIN:.0%} of the clean one: "
            f"{s['defaults_within']} of {s['checked']}" + (f"; {s['errors']} checks failed" if s["errors"] else ""))


def clean_table(models: list[dict]) -> list[str]:
    """Claimed vs clean (bench/clean_check.py): per model, plan.json's speed-up and default
    latency against the same plan and default.onnx timed alone in a fresh process, alternating;
    a summary line last."""
    head = ["model", "decision", "plan", "claimed speed-up", "clean speed-up", "clean paired ratio [5 %, 95 %]",
            f"holds within {HOLDS:.0%}", f"lossy: clean >= {LOSSY_MIN:g}x", "plan.json default ms",
            "clean default ms", "default error"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in models:
        c = m.get("clean")
        if m.get("error"):
            cells = [m["name"], _failed(m)] + [""] * (len(head) - 2)
        elif not c:
            cells = [m["name"], m.get("decision", "–"), "not checked"] + [""] * (len(head) - 3)
        elif c.get("error"):
            cells = [m["name"], c.get("decision") or "–", _plan_cell(c), _x(c.get("claimed_speedup")),
                     f"check failed: {first_line(c['error'], 100)}"] + [""] * (len(head) - 5)
        else:
            err = c.get("default_error")
            cells = [m["name"], c["decision"], _plan_cell(c), _x(c.get("claimed_speedup")),
                     f"**{_x(c.get('speedup'))}**",
                     f"{_f(c.get('paired_ratio'), '.3f')} [{_f(c.get('ratio_low'), '.3f')}, "
                     f"{_f(c.get('ratio_high'), '.3f')}]",
                     _yn(c.get("holds")), _yn(c.get("lossy_ok")), _f(c.get("claimed_default_ms"), ".4g"),
                     _f(c.get("default_ms"), ".4g"),
                     "–" if err is None else f"{err:+.1%}" + ("" if c.get("default_holds") else " **over**")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + ["", clean_line(models)]


def twice_summary(models: list[dict]) -> dict:
    """Two adapts of each model (adapt_corpus --twice): {compared, agree, disagree: [(name, both
    clean speed-ups, within noise)]}; a model either adapt of which failed is not compared."""
    rows = [m for m in models if not m.get("error") and m.get("twice") and "agree" in m["twice"]]
    bad = [(m["name"], m["twice"].get("clean_speedups"), m["twice"].get("within_noise"))
           for m in rows if not m["twice"]["agree"]]
    return {"compared": len(rows), "agree": len(rows) - len(bad), "disagree": bad,
            "failed": sum(1 for m in models if m.get("twice") and "agree" not in m["twice"])}


def twice_line(models: list[dict]) -> str:
    s = twice_summary(models)
    noise = sum(1 for _, _, w in s["disagree"] if w)
    return (f"**two adapts agree: {s['agree']} of {s['compared']}**" + (
        f"; of the {len(s['disagree'])} that disagree, {noise} differ by less than the noise bound (clean "
        "speed-ups within 3 % or their paired ratios' bootstrap intervals overlapping)" if s["disagree"] else "")
            + (f"; {s['failed']} second adapts failed" if s["failed"] else ""))


def twice_table(models: list[dict]) -> list[str]:
    """Two adapts of each model into fresh folders: each one's decision and plan, whether they
    agree (both kept the default, or the same actions on the same execution path), both clean
    speed-ups and whether those are equal within noise; a summary line last."""
    head = ["model", "first: decision, plan", "second: decision, plan", "agree", "clean speed-ups (first / second)",
            "within noise"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in models:
        t = m.get("twice")
        if m.get("error") or not t:
            continue
        first = f"{m['decision']}, {_plan_cell(m.get('clean') or {'adopted': m['decision'] == 'adapted'})}"
        if t.get("error"):
            lines.append(f"| {m['name']} | {first} | {_failed(t)}: {first_line(t['error'], 80)} | – | | |")
            continue
        second = f"{t['decision']}, {_plan_cell(t.get('clean') or {'adopted': t['decision'] == 'adapted'})}"
        sp = t.get("clean_speedups") or [None, None]
        lines.append(f"| {m['name']} | {first} | {second} | {_yn(t.get('agree'))} | {_x(sp[0])} / {_x(sp[1])} "
                     f"| {_yn(t.get('within_noise'))} |")
    return lines + ["", twice_line(models)]


def latency_cell(m: dict) -> str:
    """The weights=latency adapt of the same model in one cell: speed-up, decision, actions."""
    lat = m.get("latency")
    if not lat:
        return "–"
    if lat.get("error"):
        return f"{_failed(lat)}: {first_line(lat['error'], 80)}"
    return (f"{_x(ratio(lat['default_ms'], lat['adapted_ms']))}, {lat['decision']}, "
            f"{', '.join(lat['actions']) or '-'}")


def failures(models: list[dict]) -> list[str]:
    """One section per model whose adapt failed or timed out: its exit code and error paragraph."""
    out = []
    for m in models:
        if m.get("error"):
            out += ["", f"### {m['name']}: {_failed(m)}", "", "```", m["error"].strip(), "```"]
        elif m.get("compare_error"):
            out += ["", f"### {m['name']}: the peer comparison failed", "", "```", m["compare_error"].strip(), "```"]
        if (m.get("latency") or {}).get("error"):
            out += ["", f"### {m['name']} (weights=latency): {_failed(m['latency'])}", "", "```",
                    m["latency"]["error"].strip(), "```"]
    return out


def failed_peers(models: list[dict]) -> list[str]:
    return [f"- {m['name']}: {NAMES.get(k, k)}: {v['error']}" for m in models
            for k, v in (m.get("compare") or {}).items() if (v or {}).get("error")]


def goal_line(models: list[dict], max_loss: float) -> str:
    g = goal_summary(models, max_loss)
    if not g["total"]:
        return "3 % goal: not measured (no peer comparison in this run)"
    rest = ([f"below: {', '.join(f'{n} {_x(r)}' for n, r in g['below'])}"] if g["below"] else []) + \
        ([", ".join(f"{n} {s}" for n, s in g["other"])] if g["other"] else [])
    return (f"**{g['met']} of {g['total']} models meet the 3 % goal** (meta-infer / fastest peer within "
            f"accuracy.max_loss {max_loss:g} >= {GOAL:g})" + (f"; {'; '.join(rest)}" if rest else ""))


def _cell(v: dict | None, base) -> str:
    if not v:
        return "–"
    if v.get("error"):
        return f"failed: {v['error'][:70]}"
    ms = v.get("latency_ms")
    same = " (same plan)" if v.get("same_as") == "meta_infer" else ""
    return f"{_f(ms, '.4g')} ms, {_x(ratio(base, ms))}, loss {_f(v.get('accuracy_loss'), '.1e')}{same}"


def _path(m: dict) -> str:
    v = (m.get("compare") or {}).get("meta_infer") or {}
    p = v.get("path") or {}
    if not p:
        return "–"
    graph = f", {p['graph']} graph" if p.get("graph") and p["graph"] != p.get("precision") else ""
    via = f" via {p['loader']}" if p.get("loader") else ""
    return (f"{p.get('runtime', '?')} {p.get('precision', '?')}{graph}{via}"
            + (" (= default)" if m.get("plan_is_default") else ""))


def _goal_cell(g: str) -> str:
    return g if g in ("yes", "–") else f"**{g}**"


def compare_row(m: dict, max_loss: float = 0.01) -> str:
    c = m.get("compare") or {}
    base, r = base_ms(c), compare_ratios(m, max_loss)
    g = goal(m, max_loss)
    if m.get("error") or m.get("compare_error") or not c:
        why = (f"{_failed(m)}: {first_line(m['error'])}" if m.get("error") else
               f"failed: {first_line(m.get('compare_error') or 'no comparison')}")
        return f"| {m['name']} | {_source(m)} | {why} |" + " |" * (len(COLUMNS) + 5) + f" {_goal_cell(g)} |"
    best = fastest_peer(c, max_loss)
    mi = c.get("meta_infer") or {}
    over = " (over max loss)" if (mi.get("accuracy_loss") or 0) > max_loss else ""
    return (f"| {m['name']} | {_source(m)} | {_f(base, '.4g') if base else _cell(c.get('ort_default'), None)} "
            f"| {_x(r['aa'])} | " + " | ".join(_cell(c.get(k), base) for k in COLUMNS) + f" | {_path(m)} | "
            + (f"{NAMES[best[0]]} ({_x(r['fastest'])})" if best else "none")
            + f" | **{_x(r['vs_fastest'])}**{over} | {_x(r['vs_fastest_latency'])} | {_goal_cell(g)} |")


def peers_table(models: list[dict], max_loss: float = 0.01) -> list[str]:
    """The per-model peers table (every model: a failed one says why) with a last row of
    geometric means of every column (ORT default ms and every ratio; the goal column counts)."""
    lines = ["| model | source | ORT default ms | A/A | " + " | ".join(NAMES[k] for k in COLUMNS)
             + f" | meta-infer path | fastest peer within max_loss {max_loss:g} | meta-infer / fastest peer "
             f"| weights=latency / fastest peer | 3 % goal (>= {GOAL:g}) |",
             "|---|---|---|---|" + "---|" * (len(COLUMNS) + 5)]
    rows = [m for m in models if m.get("compare") or m.get("error") or m.get("compare_error")]
    lines += [compare_row(m, max_loss) for m in rows]
    ok = [m for m in rows if not m.get("error") and not m.get("compare_error") and m.get("compare")]
    ratios = [compare_ratios(m, max_loss) for m in ok]
    g = {k: gmean([r[k] for r in ratios]) for k in (*COLUMNS, "aa", "fastest", "vs_fastest", "vs_fastest_latency")}
    base = gmean([base_ms(m["compare"]) for m in ok])
    s = goal_summary(rows, max_loss)
    lines.append(f"| geo-mean ({len(ok)} models) | | {_f(base, '.4g')} | {_x(g['aa'])} | "
                 + " | ".join(_x(g[k]) for k in COLUMNS)
                 + f" | | {_x(g['fastest'])} | **{_x(g['vs_fastest'])}** | {_x(g['vs_fastest_latency'])} "
                 f"| {s['met']} of {s['total']} |")
    return lines


def roofline_row(m: dict) -> str:
    r = m["roofline"]
    return (f"| {m['name']} | {r['gflops']:.3g} | {r['mbytes']:.3g} | {r['precision']} | {r['bound']} "
            f"| {r['limit_ms']:.3g} | {_f(m['adapted_ms'], '.4g')} | **{r['x_limit']:.3g}x** |")


def weights(results: dict) -> str:
    """The first meta-infer column's objective: the suite's weights= override, else the defaults."""
    given = [x.lstrip("+") for x in (results.get("options") or {}).get("extra") or [] if x.lstrip("+").startswith("weights=")]
    return f"`{given[-1]}`" if given else "the defaults (`weights=balanced`)"


def markdown(results: dict) -> str:
    h = headline(results)
    mach = results["machine"]
    lines = [f"# meta-infer benchmark report ({results['date']})", "",
             goal_line(results["models"], max_loss(results)) + ".", "",
             f"Machine: {mach['cpu']}, {mach['cores']} cores ({mach['load']}), onnxruntime {mach['onnxruntime']}; "
             f"target `cpu` (**measured**, 1 intra-op thread). Suite options: `{results['options']}`; wall time "
             f"{results['wall_s'] / 60:.1f} min. Every ratio below compares figures measured side by side in this run.",
             "", "## Headline", "",
             f"- adapted vs default with {weights(results)} (adapt's own verify, geometric mean over {h['models']} "
             f"models): **{_x(h['speedup_gmean'])}**; {h['adapted']} adapted, {h['models'] - h['adapted']} kept the "
             f"default" + (f"; {h['failed']} failed" if h["failed"] else "")
             + (f"; with weights=latency {_x(h['speedup_latency_gmean'])} ({h['latency_adapted']} of "
                f"{h['latency_models']} adapted)" if h["latency_models"] else ""),
             f"- same-run comparison vs ORT default (geometric mean): meta-infer {_x(h['meta_infer_gmean'])} "
             f"with {weights(results)}, {_x(h['meta_infer_latency_gmean'])} with weights=latency, "
             + ", ".join(f"{NAMES[k]} {_x(h[k + '_gmean'])}" for k in PEERS[1:])
             + f" (A/A noise floor {_x(h['aa_gmean'])}); fastest peer within accuracy.max_loss {max_loss(results):g} "
             f"{_x(h['fastest_gmean'])}, meta-infer against it **{_x(h['vs_fastest_gmean'])}** "
             f"(weights=latency {_x(h['vs_fastest_latency_gmean'])})",
             f"- adapted latency / roofline limit (median): {_f(h['roofline_x_median'], '.3g')}x", ""]
    lines += ["## Adapted vs default on `cpu`", "",
              "From each run's plan.json (`baseline` = default plan, `measured` = chosen plan, timed interleaved in "
              "the same verify); source: the zoo (random inputs, as adapt draws them), PP-OCR from rapidocr's "
              "installed files (random inputs) or the corpus of real models (bench/corpus/, with its real inputs "
              "as `data.inputs`); exit: adapt's exit code; adapt s: its wall time, stage seconds: plan.json "
              "`timings`; `mlflow` says whether the MLflow run holds the same figures. A model whose adapt failed "
              "or timed out says so; its error paragraph is under *Failures*.", ""]
    lines += adapt_table(results["models"])
    if any(m.get("clean") for m in results["models"]):
        lines += ["", "## Claimed vs clean", "",
                  "Each adapt's plan (its run folder through `load_plan`) and its `default.onnx` (ONNX Runtime with "
                  "the target's default settings) timed again alone in a fresh process right after the adapt "
                  "(bench/clean_check.py), warm, alternating, on the first input the adapt got; the clean speed-up "
                  "is the default's median over the plan's, against plan.json's claim (verify's figures). An adopted "
                  f"plan holds when the two are within {HOLDS:.0%}; a lossy one (accuracy loss > 1e-4) should be "
                  f"adopted only at {LOSSY_MIN:g}x clean or more; a kept default times the default against "
                  "itself (its paired ratio is the noise floor).", ""]
        lines += clean_table(results["models"])
    if any(m.get("twice") for m in results["models"]):
        lines += ["", "## Two adapts of each model", ""] + twice_table(results["models"])
    lines += ["", "## Against what a user would try instead", "",
              "Per model, in one interleaved timing run with verify's method (bench/ort_baselines.py compare(), the "
              f"peers in bench/peers.py; {results['options'].get('compare_runs')} timed runs each, every one after "
              "two untimed warm runs, each round starting at the next peer; median): ONNX Runtime as it comes "
              "(ORT default: CPU provider, 1 intra-op thread, ORT_ENABLE_ALL, on the run's `default.onnx`), ORT "
              "`quantize_static` (QDQ, QUInt8 activations / QInt8 weights, per channel, calibrated on the same "
              "inputs), ORT `quantize_dynamic` (defaults), OpenVINO's CPU plugin at its default precision (bf16 on "
              "a CPU with AMX / AVX512-BF16) and with `INFERENCE_PRECISION_HINT` f32 (1 thread, LATENCY hint, 1 "
              "stream), OpenVINO after NNCF's int8 post-training quantization (same calibration inputs), NNCF's "
              "accuracy-aware int8 (`nncf.quantize_with_accuracy_control`, max_drop = accuracy.max_loss on the same "
              "loss the table shows, same inputs; **capped** at "
              f"{AAC_ITERATIONS} layers reverted to float, each ranking on at most {AAC_RANKING_SUBSET} inputs, "
              f"ended after {AAC_TIMEOUT_S:.0f} s (then `failed:`), since its ranking takes minutes on a large "
              "detector; compiled at f32, as NNCF validates it), and "
              f"meta-infer's two plans, {weights(results)} (what a user gets: the headline, the goal) and "
              "`weights=latency` (the peers' objective; `(same plan)` when it is the first one), each "
              "`metainfer_core.plan.deployable.load_plan` of its run folder when the module exists, else "
              "its `model.onnx` on ONNX Runtime (the path column says which runtime and precision the first ran). Cells: median "
              "latency, ratio to ORT default (> 1 = faster), accuracy loss against the fp32 reference "
              "(`plan_loss`, worst case over the inputs); a peer that could not convert, compile or run says "
              "`failed:` and why. ORT default is loaded first and last and its figure pools both copies; A/A is the "
              "first copy against the second (noise floor); each of meta-infer's plans is timed in two sessions too, pooled, "
              "and a plan that is the default artifact itself `(= default)` is one contender with ORT default: "
              "all four sessions pooled, the same figure for both. `fastest peer` is the fastest of the seven peers whose "
              f"loss is within accuracy.max_loss ({max_loss(results):g}); `meta-infer / fastest peer` is its latency over "
              "meta-infer's first plan (> 1 = meta-infer faster), the next column the same for weights=latency; "
              "`3 % goal` says whether the first ratio is at least "
              f"{GOAL:g} (**below** otherwise; **over max_loss** when meta-infer's own plan lost more than the "
              "bound on these inputs; **failed** when its adapt or comparison failed). Zoo and PP-OCR-from-rapidocr models are compared on the random inputs adapt "
              "draws, corpus models on their real `data.inputs` samples. The last row holds the geometric mean "
              "of every column (ORT default ms and every ratio) and how many models meet the goal.", ""]
    lines += peers_table(results["models"], max_loss(results))
    bad_peers = failed_peers(results["models"])
    if bad_peers:
        lines += ["", "Failed peers:", ""] + bad_peers
    fails = failures(results["models"])
    if fails:
        lines += ["", "## Failures"] + fails
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
    lines += _cost_model(results.get("cost_model")) + _predictor(results.get("predictor")) + _scaling(results.get("search_scaling")) \
        + _reprofile(results.get("reprofile")) + _mlflow(results.get("mlflow"))
    plots = results.get("plots") or []
    if plots:
        lines += ["", "## Plots", ""] + [f"![{n}]({n})" for n in plots]
    return "\n".join(lines) + "\n"


def _cost_model(f: dict | None) -> list[str]:
    if not f or not f.get("models"):
        return []
    return ["", "## Cost model on these models (adapt's predictions vs its verify, bench/plan_predictions.py)", "",
            "Each model's first adapt of this run (the defaults; a fresh store had never seen that model: it "
            "held the models before it in the table, the learning curve); its default plan and every verified "
            "plan that ran. Error: |predicted / measured - 1| of latency (per execution path also of peak memory, the "
            "runtime's footprint included).", ""] + plan_predictions.markdown(f)


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
                   f"| {_x(ratio(r['search_s'], first['search_s']))} |")
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
                   f"| {_x(ratio(q['seconds'], r['full_s']))} | "
                   + (f"{r.get('change', '–')} | {d['seconds']:.2f} ({', '.join(d['drifted']) or 'none'}) "
                      f"| {d['remeasured']} / {d['carried']} | {_x(ratio(d['seconds'], r['full_s']))} |"
                      if d else "– | – | – | – |"))
    return out


def _mlflow(m: dict | None) -> list[str]:
    if not m:
        return []
    out = ["", "## MLflow", "", f"Store `{m['uri']}`; one experiment per model, its runs on every target (tag "
           f"`target`). Open it with `mlflow ui --backend-store-uri {m['uri']}` and compare the runs of an experiment.",
           "", "| experiment | target | runs | params / metrics of this run | aligned with the other runs |",
           "|---|---|---|---|---|"]
    for e in m["experiments"]:
        out.append(f"| {e['name']} | {e.get('target', '-')} | {e['runs']} | {e['params']} / {e['metrics']} | "
                   f"{'yes' if not e['differs'] else 'differs: ' + ', '.join(e['differs'][:6])} |")
    return out


def _latency_speedup(m: dict) -> str:
    lat = m.get("latency")
    if not lat:
        return "–"
    return "failed" if lat.get("error") else _x(ratio(lat["default_ms"], lat["adapted_ms"]))


def readme_block(results: dict, report_path: str) -> str:
    """The compact table that goes between the markers in docs/benchmarks.md (the name
    `readme_block` is kept from when the block lived in README.md): every model (zoo, PP-OCR, corpus),
    a failed one included, and a last row of geometric means of every column."""
    h, limit = headline(results), max_loss(results)
    lines = [BEGIN, f"Last run {results['date']} on {results['machine']['cpu']} ({results['machine']['cores']} cores, "
             f"shared: {results['machine']['load']}), `{results['command']}`, {results['wall_s'] / 60:.1f} min; "
             f"full report `{report_path}`. Target `cpu` (measured, 1 thread). "
             + goal_line(results["models"], limit) + ".", "",
             "| model | source | default ms | adapted ms | speed-up | accuracy loss | decision | ORT static "
             "| ORT dynamic | fastest peer | meta-infer / fastest peer | 3 % goal | weights=latency speed-up "
             "| weights=latency / fastest peer | A/A | adapted / roofline | adapt s |",
             "|" + "---|" * 17]
    ok = []
    for m in results["models"]:
        if m.get("error"):
            cells = [m["name"], _source(m), _failed(m), *[""] * 8, "failed", *[""] * 4, _f(m.get("adapt_s"), ".0f")]
            lines.append("| " + " | ".join(cells) + " |")
            continue
        ok.append(m)
        c = m.get("compare") or {}
        base, r, best = base_ms(c), compare_ratios(m, limit), fastest_peer(c, limit)
        ort = [_x(ratio(base, (c.get(k) or {}).get("latency_ms"))) + f" ({_f((c.get(k) or {}).get('accuracy_loss'), '.0e')})"
               for k in ("ort_static", "ort_dynamic")]
        lines.append(f"| {m['name']} | {_source(m)} | {_f(m['default_ms'], '.3g')} | {_f(m['adapted_ms'], '.3g')} "
                     f"| {_x(ratio(m['default_ms'], m['adapted_ms']))} | {_f(m['accuracy_loss'], '.1e')} "
                     f"| {m['decision']} | {ort[0]} | {ort[1]} "
                     f"| {NAMES[best[0]] + ' ' + _x(r['fastest']) if best else '–'} "
                     f"| {_x(r['vs_fastest'])} | {_goal_cell(goal(m, limit))} | {_latency_speedup(m)} "
                     f"| {_x(r['vs_fastest_latency'])} | {_x(r['aa'])} "
                     f"| {_f((m.get('roofline') or {}).get('x_limit'), '.3g')}x | {_f(m.get('adapt_s'), '.0f')} |")
    ratios = [compare_ratios(m, limit) for m in ok if m.get("compare") and not m.get("compare_error")]
    gm = lambda xs: gmean(list(xs))  # noqa: E731
    losses = [m["accuracy_loss"] for m in ok if m.get("accuracy_loss") is not None]
    g = goal_summary(results["models"], limit)
    lines.append(f"| geo-mean ({len(ok)} models) | | {_f(gm(m['default_ms'] for m in ok), '.3g')} "
                 f"| {_f(gm(m['adapted_ms'] for m in ok), '.3g')} | {_x(h['speedup_gmean'])} "
                 f"| max {_f(max(losses) if losses else None, '.1e')} | {h['adapted']} adapted "
                 f"| {_x(gm(r['ort_static'] for r in ratios))} | {_x(gm(r['ort_dynamic'] for r in ratios))} "
                 f"| {_x(gm(r['fastest'] for r in ratios))} | {_x(gm(r['vs_fastest'] for r in ratios))} "
                 f"| {g['met']} of {g['total']} | {_x(h['speedup_latency_gmean'])} "
                 f"| {_x(gm(r['vs_fastest_latency'] for r in ratios))} | {_x(gm(r['aa'] for r in ratios))} "
                 f"| {_f(gm((m.get('roofline') or {}).get('x_limit') for m in ok), '.3g')}x "
                 f"| {_f(gm(m.get('adapt_s') for m in results['models']), '.0f')} |")
    lines += ["", f"Geometric-mean speed-up {_x(h['speedup_gmean'])} (meta-infer with {weights(results)}, adapt's "
                  f"verify; weights=latency {_x(h['speedup_latency_gmean'])}); in the suite's "
                  f"own interleaved comparison meta-infer {_x(h['meta_infer_gmean'])} (weights=latency "
                  f"{_x(h['meta_infer_latency_gmean'])}), ORT static "
                  f"{_x(h['ort_static_gmean'])}, ORT dynamic {_x(h['ort_dynamic_gmean'])}, OpenVINO "
                  f"{_x(h['ov_default_gmean'])} (f32 {_x(h['ov_f32_gmean'])}, "
                  f"NNCF int8 {_x(h['ov_nncf_int8_gmean'])}, NNCF accuracy-aware int8 {_x(h['ov_nncf_aac_gmean'])}, "
                  f"capped at {AAC_ITERATIONS} reverted layers), "
                  f"ORT default against itself (A/A noise floor) {_x(h['aa_gmean'])}; meta-infer against the fastest "
                  f"peer within accuracy.max_loss {_x(h['vs_fastest_gmean'])} (weights=latency "
                  f"{_x(h['vs_fastest_latency_gmean'])}). Columns not named weights=latency: meta-infer with "
                  f"{weights(results)}. Source: zoo and PP-OCR from rapidocr "
                  "on random inputs, corpus models on their real inputs. ORT columns: speed-up vs ORT default, "
                  "accuracy loss in brackets; fastest peer: its speed-up vs ORT default; 3 % goal: meta-infer / "
                  f"fastest peer >= {GOAL:g}; adapt s: adapt's wall time (geo-mean row: geometric means, the "
                  "loss column its worst case).", END]
    return "\n".join(lines)


def replace_block(text: str, block: str) -> str:
    """Swap the marked block for `block`; the markers must appear once each, in order."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"docs/benchmarks.md must hold exactly one {BEGIN} ... {END} block (found {text.count(BEGIN)} begin and "
                         f"{text.count(END)} end markers); restore the results block's markers there and rerun.")
    return re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _: block, text, count=1, flags=re.S)
