"""plan.json for people: the terminal summary after adapt and the run folder's plan.md, both
rendered from plan.json's content alone (so an old run folder renders the same way), and the
chosen plan named by what its actions do."""
from __future__ import annotations

import math
import re
from typing import Any

from metainfer_core.actions import ACTIONS
from metainfer_core.search.beam import depth_reasons
from metainfer_core.plan.serving_report import serving_line, serving_section
from metainfer_core.plan.shapes_report import shapes_section


def _params_text(step: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in (step.get("params") or {}).items())


def _words(step: dict) -> tuple[str, str] | None:
    action = ACTIONS.get(step.get("kind", ""))
    return action.words(step.get("params") or {}, step.get("scope", "")) if action is not None else None


def action_name(step: dict) -> str:
    words = _words(step)
    return words[0] if words else step.get("kind", "?")


def action_words(step: dict) -> str:
    """What one step does, in words (an action not installed here: its kind and params)."""
    words = _words(step)
    return words[1] if words else f"{step.get('kind', '?')} ({_params_text(step)})"


def action_where(step: dict, shown: int = 4) -> str:
    nodes = step.get("nodes") or []
    if not nodes:
        return "the whole graph" + (f" ({step['scope']})" if step.get("scope") not in (None, "", "all") else "")
    names = ", ".join(nodes[:shown]) + (", ..." if len(nodes) > shown else "")
    scope = step.get("scope")
    scope_text = {"all": "", "compute": " (Conv/MatMul/Gemm)", "matmul": " (MatMul/Gemm)"}.get(scope, f" ({scope})")
    return f"{len(nodes)} node{'s' if len(nodes) != 1 else ''}{scope_text}: {names}"


def plan_name(actions: list[dict]) -> str:
    """The plan by what it does: "int8 + fused epilogues"; "default (unchanged)" without actions."""
    names = list(dict.fromkeys(action_name(a) for a in actions))
    return " + ".join(names) if names else "default (unchanged)"


# --- numbers ---------------------------------------------------------------------------------

def _ok(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _ms(x: Any) -> str:
    return f"{x:.4g}" if _ok(x) else "-"


def human_bytes(x: Any) -> str:
    if not _ok(x):
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if x >= size:
            return f"{x / size:.3g} {unit}"
    return f"{int(x)} B"


def _loss(x: Any) -> str:
    return ("0" if x < 1e-12 else f"{x:.3g}") if _ok(x) else "-"


def _ratio(default: Any, chosen: Any, lower_is: str = "faster") -> str:
    if not (_ok(default) and _ok(chosen)) or chosen <= 0 or default <= 0:
        return ""
    if abs(chosen / default - 1) < 0.005:
        return "same"
    if lower_is == "faster":
        return f"{default / chosen:.2f}x {'faster' if chosen < default else 'slower'}"
    return f"{(chosen - default) / default:+.0%}"


def speedup(plan: dict) -> float | None:
    d, c = (plan.get("baseline") or {}).get("latency_ms"), (plan.get("measured") or {}).get("latency_ms")
    return d / c if _ok(d) and _ok(c) and c > 0 else None


def comparison_rows(plan: dict) -> list[tuple[str, str, str, str]]:
    """(what, default, chosen, change): the default plan against the plan the run keeps."""
    b, m, p = plan.get("baseline") or {}, plan.get("measured") or {}, plan.get("predicted") or {}
    return [
        ("latency median (ms)", _ms(b.get("latency_ms")), _ms(m.get("latency_ms")),
         _ratio(b.get("latency_ms"), m.get("latency_ms"))),
        ("latency p90 (ms)", _ms(b.get("p90_ms")), _ms(m.get("p90_ms")), _ratio(b.get("p90_ms"), m.get("p90_ms"))),
        ("predicted latency (ms)", _ms(b.get("predicted_latency_ms")), _ms(p.get("latency_ms")), ""),
        ("peak memory", human_bytes(b.get("peak_mem_bytes")), human_bytes(m.get("peak_mem_bytes")),
         _ratio(b.get("peak_mem_bytes"), m.get("peak_mem_bytes"), "memory")),
        ("predicted peak memory", human_bytes(b.get("predicted_peak_mem_bytes")), human_bytes(p.get("peak_mem_bytes")),
         ""),
        *_accuracy_rows(plan, b, m),
        ("compile (s)", _ms(b.get("compile_s")), _ms(m.get("compile_s")), ""),
    ]


def _accuracy_rows(plan: dict, b: dict, m: dict) -> list[tuple[str, str, str, str]]:
    """The loss the bound judges, on the samples that judge it; beside it the loss on the samples
    that calibrated the plans, where those differ."""
    samples = plan.get("accuracy_samples") or {}
    bound = f"bound {plan.get('accuracy_bound')}" if plan.get("accuracy_bound") is not None else ""
    if not samples or samples.get("judged_on") == "the calibration samples":
        return [("accuracy loss", _loss(b.get("accuracy_loss")), _loss(m.get("accuracy_loss")), bound)]
    return [(f"accuracy loss, {samples.get('judging')} held-out samples", _loss(b.get("accuracy_loss")),
             _loss(m.get("accuracy_loss")), bound),
            (f"accuracy loss, {samples.get('calibration')} calibration samples", _loss(b.get("calibration_loss")),
             _loss(m.get("calibration_loss")), "not judged")]


def _confirmed(plan: dict) -> dict | None:
    """The confirmation whose figures plan.json reports (the adopted plan's), if any."""
    label = _chosen_label(plan)
    return next((c for c in plan.get("confirmations") or [] if c.get("pays") and c.get("label") == label), None) \
        if plan.get("decision") == "adapted" else None


def latency_note(plan: dict) -> str:
    """Where the latency figures of the default vs chosen table come from."""
    c = _confirmed(plan)
    alone = plan.get("default_alone") or {}
    if c is None and (plan.get("decision") == "adapted" or not alone or alone.get("error")):
        return "Latencies: verify's interleaved rounds."
    if c is None:
        return (f"Latency: the default timed alone {_where(alone)}, {alone.get('rounds')} rounds; verify's round "
                "figures are in the candidates table.")
    return (f"Latencies: the default and the chosen plan timed alone together {_where(c)}, {c.get('rounds')} "
            f"alternating rounds (paired ratio {c.get('ratio', float('nan')):.3f}, 95% bounds "
            f"{c.get('ratio_low', float('nan')):.3f}-{c.get('ratio_high', float('nan')):.3f}); verify's round "
            "figures are in the candidates table.")


def _where(c: dict) -> str:
    if not c.get("isolated"):
        return "in the adapt's process"
    n = len(c.get("process_speedups") or [])
    return f"in {n} fresh processes, pooled" if n > 1 else "in a process of its own"


STAGES = ("normalize", "profile", "train", "search", "verify", "confirm", "serve", "compile", "total")


def stage_text(plan: dict) -> str:
    t = plan.get("timings") or {}
    parts = [f"{k} {t[f'{k}_s']:.1f} s" for k in STAGES if _ok(t.get(f"{k}_s"))]
    total = (plan.get("budget") or {}).get("total_s")
    return " | ".join(parts) + (f" (budget {total:g} s)" if _ok(total) else "")


def named_reason(plan: dict) -> str:
    """plan.json's reason with each candidate's label followed by its plan's name, the first time."""
    names = {c.get("label"): plan_name(c.get("actions") or []) for c in plan.get("candidates") or []}
    seen: set[str] = set()

    def name(m: re.Match) -> str:
        label = m.group(0)
        if label not in names or label in seen:
            return label
        seen.add(label)
        return f"{label} ({names[label]})"
    return re.sub(r"\bcandidate\d+\b", name, str(plan.get("reason")))


def _chosen_label(plan: dict) -> str | None:
    return next((c["label"] for c in plan.get("candidates") or [] if (c.get("verdict") or "").startswith("chosen")),
                None)


def headline(plan: dict) -> str:
    model, target = plan.get("model") or {}, plan.get("target") or {}
    sp = speedup(plan)
    gain = f", {sp:.2f}x faster" if sp and plan.get("decision") == "adapted" else ""
    return (f"{model.get('name')} on {target.get('name')} ({target.get('measurement')}): {plan.get('decision')}{gain}"
            f" - {plan_name(plan.get('actions') or [])}")


# --- plain text (terminal) -------------------------------------------------------------------

def _kept(plan: dict) -> str:
    return "chosen" if plan.get("decision") == "adapted" else "kept"


def text_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)        # noqa: E731
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip()
    return "\n".join([line(header), line(tuple("-" * w for w in widths)), *map(line, rows)])


def search_text(search: dict) -> str:
    """How far the search got: the depth reached of the configured one, candidates scored."""
    depth = f" of {search['depth']}" if search.get("depth") else ""
    return (f"depth {search.get('levels', '-')}{depth} reached, {search.get('evaluated', '-')} candidates scored"
            + (", stopped by the budget" if search.get("stopped_by_budget") else "")
            + depth_reasons(search.get("levels", 0), search.get("depth", 0), bool(search.get("stopped_by_budget")),
                            search.get("dive_stalled_at", 0)))



def summary_text(plan: dict, report_path: str | None = None) -> str:
    """The end-of-run summary: what was done, default vs chosen, why, stage times, warnings."""
    lines = [headline(plan)]
    for i, a in enumerate(plan.get("actions") or [], 1):
        lines += [""] * (i == 1) + [f"  {i}. {action_words(a)}; on {action_where(a, 3)}"]
    lines += ["", text_table(("", "default", _kept(plan), "change"), comparison_rows(plan)), latency_note(plan), ""]
    target = plan.get("target") or {}
    if target.get("measurement") == "modeled" and target.get("note"):
        lines.append(f"note: {target['note']}")         # the table's latencies are not measurements
    lines.append(f"why: {named_reason(plan)}")
    served = serving_line(plan)
    if served:
        lines.append(served)
    lines.append(f"stages: {stage_text(plan)}")
    if plan.get("search"):
        lines.append(f"search: {search_text(plan['search'])}")
    for w in plan.get("warnings") or []:
        lines.append(f"WARNING: {w}")
    if report_path:
        lines.append(f"report: {report_path}")
    return "\n".join(lines)


# --- Markdown (plan.md) ----------------------------------------------------------------------

def _md_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    esc = lambda c: str(c).replace("|", "\\|").replace("\n", " ")      # noqa: E731
    return ["| " + " | ".join(map(esc, header)) + " |", "|" + "---|" * len(header),
            *["| " + " | ".join(map(esc, r)) + " |" for r in rows]]


def bytes_vs_budget(extra: int, budget: int | None) -> str:
    """Bytes a plan adds to (or saves on) the default's peak, and their share of the target's
    memory budget (what the score prices memory against)."""
    share = f" ({extra / budget:+.2%} of {human_bytes(budget)})" if _ok(budget) and budget > 0 else ""
    return f"{'+' if extra >= 0 else '-'}{human_bytes(abs(extra))}{share}"


def memory_added(plan: dict, peak: Any) -> str:
    base = (plan.get("baseline") or {}).get("peak_mem_bytes")
    if not (_ok(peak) and _ok(base)):
        return "-"
    return bytes_vs_budget(peak - base, (plan.get("target") or {}).get("memory_budget_bytes"))


def _candidate_rows(plan: dict) -> list[tuple[str, ...]]:
    b = plan.get("baseline") or {}
    rows = [("default", "default (unchanged)", _ms(b.get("predicted_latency_ms")), _ms(b.get("latency_ms")),
             human_bytes(b.get("predicted_peak_mem_bytes")), human_bytes(b.get("peak_mem_bytes")), "",
             _losses(b), "the baseline every plan is timed against")]
    for c in plan.get("candidates") or []:
        m = c.get("measured") or {}
        verdict = c.get("verdict") or (f"failed: {c['error']}" if c.get("error") else "-")
        rows.append((c.get("label", "?"), plan_name(c.get("actions") or []), _ms(c.get("predicted_latency_ms")),
                     _ms(m.get("latency_ms")), human_bytes(c.get("predicted_peak_mem_bytes")),
                     human_bytes(m.get("peak_mem_bytes")), memory_added(plan, m.get("peak_mem_bytes")),
                     _losses(m), verdict))
    return rows


def _judged_words(plan: dict) -> str:
    samples = plan.get("accuracy_samples") or {}
    if not samples:
        return "accuracy loss on the validation samples"
    return (f"accuracy loss judged on {samples.get('judging')} samples ({samples.get('judged_on')}), "
            f"{samples.get('calibration')} samples calibrated the plans")


def _losses(m: dict) -> str:
    """A plan's accuracy loss, with its loss on the calibration samples where it differs."""
    held, cal = m.get("accuracy_loss"), m.get("calibration_loss")
    return _loss(held) + (f" (calibration {_loss(cal)})" if _ok(cal) and _ok(held) and cal != held else "")


def plan_markdown(plan: dict, plots: list[tuple[str, str]] = ()) -> str:
    """plan.md: the decision and why, the actions in words and where they apply, default vs
    chosen, every verified candidate (predicted vs measured, verdict), `plots` ((title, file
    beside plan.md) each), warnings, stage times."""
    target, pred = plan.get("target") or {}, plan.get("predictor") or {}
    chosen = _chosen_label(plan)
    out = [f"# {headline(plan)}", "",
           f"**Decision:** {plan.get('decision')}" + (f" ({chosen})" if chosen else "") + ". "
           f"**Why:** {named_reason(plan)}", ""]
    if target.get("note"):
        out += [f"*{target['note']}.*", ""]
    out += ["## What changed", ""]
    actions = plan.get("actions") or []
    steps = [(str(i), a.get("kind", "?"), action_words(a), action_where(a)) for i, a in enumerate(actions, 1)]
    out += _md_table(("#", "action", "what it does", "where"), steps) if actions else \
        ["Nothing: the model runs as the default plan (the normalized graph on the default path)."]
    out += ["", f"## Default vs {_kept(plan)}", "",
            *_md_table(("", "default", _kept(plan), "change"), comparison_rows(plan)), "", latency_note(plan), ""]
    out += shapes_section(plan)
    out += serving_section(plan)
    out += ["## Candidates verified", "",
            "Predicted by the cost model, measured by verify on the target (median latency over interleaved runs); "
            f"{_judged_words(plan)}.", ""]
    out += _md_table(("plan", "actions", "predicted ms", "measured ms", "predicted memory", "measured memory",
                      "memory vs default (share of the budget)", "accuracy loss", "verdict"), _candidate_rows(plan))
    for title, file in plots:
        out += ["", f"![{title}]({file})"]
    out += ["", "## Warnings", ""] + ([f"- {w}" for w in plan.get("warnings") or []] or ["None."])
    budget = plan.get("budget") or {}
    timings = plan.get("timings") or {}
    allowed = budget.get("allowed_s") or {}
    out += ["", "## Stage times", ""]
    out += _md_table(("stage", "seconds", "allowed by the budget (s)"),
                     [(k, f"{timings[f'{k}_s']:.2f}", f"{allowed[k]:.0f}" if _ok(allowed.get(k)) else "-")
                      for k in STAGES if _ok(timings.get(f"{k}_s"))])
    if _ok(budget.get("total_s")):
        out += ["", f"Budget: {budget['total_s']:g} s in all."]
    search = plan.get("search") or {}
    out += ["", "## Run", "",
            f"- target: {target.get('name')} ({target.get('measurement')}), firmware `{target.get('firmware')}`, "
            f"driver {target.get('driver')}, runtime {target.get('runtime')}",
            f"- fingerprint version: {plan.get('fingerprint_version')}; predictor: {pred.get('n_records')} records, "
            f"validation MAPE {_loss(pred.get('val_mape'))}",
            f"- search: {search_text(search)}",
            f"- model: {(plan.get('model') or {}).get('source')}, sha256 {(plan.get('model') or {}).get('sha256')}",
            f"- artifact: {plan.get('artifact')}", f"- MLflow run: {plan.get('mlflow_run_id')}", ""]
    return "\n".join(out)
