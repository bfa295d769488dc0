"""adapt on `cpu` over the corpus of real models (bench/corpus/), each with its real
inputs (data.inputs), default search, one model after another, through the same code as
bench/suite.py (bench/modelset.py bench_model, bench/report.py's tables): per model, exit code,
decision, speed-up (default / chosen, both measured in the same verify run), execution path,
accuracy loss, adapt wall time and each stage's seconds (plan.json `timings`), then every
failure's error paragraph (a failed or timed-out adapt is a row, not dropped).

With --peers (the default; --no-peers turns it off), right after each model's adapt and while its
run folder still exists, the peers of bench/peers.py (ORT default loaded first and last, ORT
quantize_static, ORT quantize_dynamic, OpenVINO default precision, OpenVINO f32, OpenVINO+NNCF
int8, NNCF accuracy-aware int8) and meta-infer's plans (each run folder through
metainfer_core.plan.deployable.load_plan, peers.PlanPeer)
are timed side by side in one interleaved run (ort_baselines.compare_run, --rounds, 30 by
default) on the same real inputs the adapt got (the .npz, read as adapt reads it, against the
run's default.onnx), scored with plan_loss against ORT's fp32 outputs on those inputs; then
bench/report.py's peers table: each one's ratio to ORT default and loss, meta-infer's execution
path, the fastest peer within the plan's accuracy bound (accuracy.max_loss), meta-infer against
it and the 3 % goal (>= 0.97), geo-means last. Each model is adapted with the defaults (what a
user runs) and again with weights=latency (the objective the peers optimise); both plans are
timed beside the peers (bench/modelset.py bench_model).

Right after each model's first adapt (the defaults), before anything else is timed, its clean
check (bench/clean_check.py, issue 47): the plan (load_plan) and default.onnx alone in a fresh
process, warm, alternating (--clean-rounds, 300 by default), on the first real input; then
bench/report.py's "claimed vs clean" table: plan.json's speed-up and default latency against the
clean ones, whether an adopted plan holds within 3 %, whether a lossy one is at least 1.03x clean.

With --twice, each model is adapted with the defaults twice, each time into a fresh artifacts
folder of its own (nothing shared: no fingerprint library, no predictor; without --twice the
models share one folder), the second run clean-checked too, and the two compared: they agree
when both kept the default or both adopted the same plan (same actions, kinds and params, on
the same execution path); a disagreement shows both clean speed-ups and whether their
paired-ratio intervals overlap (equal within noise). --no-peers keeps this quick, and
--no-latency skips the weights=latency adapt (which only the peers table and the adapt table's
weights=latency column use).

    python -m bench.adapt_corpus [--only key,key] [--timeout S per model] [--no-peers] [--rounds N]
                                 [--clean-rounds N] [--twice] [--no-latency] [--by-size] [--json PATH]
                                 [extra hydra overrides, e.g. search=quick]

--by-size adapts the smallest .onnx first; --json writes the per-model rows (bench/report.py's
row format, as in the suite's results.json).
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from bench import clean_check, corpus, modelset, report

ROUNDS = 30  # interleaved timed runs per peer


def main(argv: list[str]) -> int:
    keys, timeout, with_peers, rounds, by_size, json_path = None, 1800.0, True, ROUNDS, False, None
    clean_rounds, twice, latency = clean_check.ROUNDS, False, True
    flags = ("--only", "--timeout", "--peers", "--no-peers", "--rounds", "--by-size", "--json", "--clean-rounds",
             "--twice", "--no-latency")
    while argv[:1] and argv[0] in flags:
        flag = argv.pop(0)
        if flag in ("--peers", "--no-peers"):
            with_peers = flag == "--peers"
        elif flag == "--by-size":
            by_size = True
        elif flag == "--twice":
            twice = True
        elif flag == "--no-latency":
            latency = False
        elif flag == "--clean-rounds":
            clean_rounds = int(argv.pop(0))
        elif flag == "--only":
            keys = argv.pop(0).split(",")
        elif flag == "--timeout":
            timeout = float(argv.pop(0))
        elif flag == "--rounds":
            rounds = int(argv.pop(0))
        else:
            json_path = Path(argv.pop(0))
    if argv[:1] and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    stray = [a for a in argv if a.startswith("-")]
    if stray:       # hydra overrides never start with a dash: a misspelt flag, not one for every adapt
        print(f"unknown option(s) {stray}: the options are {list(flags)} (then hydra overrides, key=value); "
              "see python -m bench.adapt_corpus --help", file=sys.stderr)
        return 2
    unknown = corpus.unknown_keys(keys or [])
    if unknown:
        print(unknown, file=sys.stderr)
        return 2
    models = modelset.entries(keys or [m.key for m in corpus.CORPUS], with_corpus=True, samples=corpus.SAMPLES)
    if by_size:
        models.sort(key=lambda e: e.path.stat().st_size if e.path else 0)
    rows = []
    with tempfile.TemporaryDirectory(prefix="metainfer-corpus-") as tmp:
        for e in models:
            print(f"(corpus: adapting {e.key} ...)", file=sys.stderr, flush=True)
            say = lambda msg: print(f"(corpus: {msg.strip()})", file=sys.stderr, flush=True)  # noqa: E731
            if twice:       # both adapts into fresh folders of their own, removed after the model
                with tempfile.TemporaryDirectory(prefix=f"metainfer-{e.key}-1-", dir=tmp) as one, \
                        tempfile.TemporaryDirectory(prefix=f"metainfer-{e.key}-2-", dir=tmp) as two:
                    rows.append(modelset.bench_model(e, modelset.with_artifacts(argv, Path(one)), rounds=rounds,
                                                     timeout=timeout, peers=with_peers, say=say, latency=latency,
                                                     clean_rounds=clean_rounds, twice=Path(two)))
            else:
                rows.append(modelset.bench_model(e, [f"paths.artifacts={tmp}", *argv], rounds=rounds, timeout=timeout,
                                                 peers=with_peers, say=say, latency=latency,
                                                 clean_rounds=clean_rounds))
            r = rows[-1]
            print(report.adapt_table([r], links=False)[-1], file=sys.stderr, flush=True)
            if r.get("clean"):
                print(report.clean_table([r])[2], file=sys.stderr, flush=True)
            if r.get("twice"):
                print(report.twice_table([r])[2], file=sys.stderr, flush=True)
            if json_path is not None:       # after each model: a run cut short keeps what it measured
                json_path.write_text(json.dumps(rows, indent=1, default=str))
            if r.get("error"):
                print(f"  {e.key} failed: {r['error']}", file=sys.stderr, flush=True)
            elif with_peers:
                print(report.compare_row(r, _max_loss(rows)) + f" ({r.get('peers_s', 0):.0f} s)",
                      file=sys.stderr, flush=True)
    print("\n".join(report.adapt_table(rows, links=False)))
    print(f"\nClaimed vs clean: each plan and its default.onnx alone in a fresh process right after the adapt, "
          f"warm, alternating ({clean_rounds} rounds at most) on the first real input (bench/clean_check.py):\n")
    print("\n".join(report.clean_table(rows)))
    if twice:
        print("\nTwo adapts of each model with the defaults, each into a fresh artifacts folder:\n")
        print("\n".join(report.twice_table(rows)))
    if with_peers:
        limit = _max_loss(rows)
        print(f"\nMeta-infer vs its peers on each model's real inputs (the {corpus.SAMPLES} samples of data.inputs; "
              f"{rounds} interleaved rounds; cells: median ms, ratio to ORT default (> 1 = faster), plan_loss "
              f"against ORT's fp32 outputs; accuracy.max_loss {limit:g}):\n")
        print(report.goal_line(rows, limit) + "\n")
        print("\n".join(report.peers_table(rows, limit)))
        bad = report.failed_peers(rows)
        if bad:
            print("\nFailed peers:\n")
            print("\n".join(bad))
    print("\n".join(report.failures(rows)))
    if json_path is not None:
        json_path.write_text(json.dumps(rows, indent=1, default=str))
    return 1 if any(r.get("error") for r in rows) else 0


def _max_loss(rows: list[dict]) -> float:
    """The plans' accuracy bound (accuracy.max_loss) when they agree, else conf's default 0.01."""
    known = {r.get("accuracy_bound") for r in rows if isinstance(r.get("accuracy_bound"), (int, float))}
    return known.pop() if len(known) == 1 else 0.01


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
