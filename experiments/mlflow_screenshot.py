"""The MLflow screenshot in docs/plan-json.md: one zoo model adapted on two targets into a temporary store
(one experiment per model), `mlflow ui` started on it, and the experiment's runs table, with the
columns that compare targets (target, plan, speed-up, latency, loss), captured in headless
Chromium over its DevTools protocol.

    python -m experiments.mlflow_screenshot [--model mlp] [--targets cpu,fpga] [--out bench/images/mlflow_runs.png]

Needs Debian's Chromium (`apt-get install -y chromium`) or any `chromium` / `google-chrome` on
PATH (--chromium PATH). Not part of the test suite. The PNG is palette-quantized to stay small.
"""
from __future__ import annotations

import argparse
import base64
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from bench.adapt_run import run_adapt

QUICK = ["search=quick", "profile.reps=3", "profile.warmup=0", "profile.batch_gradient=[1]", "verify.runs=5"]
WEIGHTS = ("latency", "accuracy")       # two runs per target: two plans each target's rows can show
# the runs table's columns (MLflow's ids) in this order, with their widths in pixels
COLUMNS = {"attributes.`Run Name`": 360, "tags.`target`": 70, "tags.`plan`": 190, "metrics.`speedup`": 90,
           "metrics.`measured.latency_ms`": 140, "metrics.`baseline.latency_ms`": 140,
           "metrics.`measured.accuracy_loss`": 150}


def _chromium(given: str | None) -> str:
    found = given or next((c for c in ("chromium", "chromium-browser", "google-chrome") if shutil.which(c)), None)
    if not found or not shutil.which(found):
        sys.exit("mlflow_screenshot: no Chromium found. Install Debian's package with `apt-get install -y "
                 "chromium` (or give --chromium PATH to a chromium / google-chrome binary) and run this again.")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, seconds: float) -> bytes:
    end = time.monotonic() + seconds
    while True:
        try:
            return urllib.request.urlopen(url, timeout=2).read()
        except OSError:
            if time.monotonic() > end:
                raise SystemExit(f"mlflow_screenshot: {url} did not answer within {seconds:.0f} s")
            time.sleep(0.5)


class DevTools:
    """A Chromium page driven over the DevTools protocol (websockets, a dependency of prefect)."""

    def __init__(self, binary: str, width: int, height: int, profile: str):
        self.port = _free_port()
        self.proc = subprocess.Popen([binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                                      f"--remote-debugging-port={self.port}", f"--user-data-dir={profile}",
                                      f"--window-size={width},{height}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pages = json.loads(_wait_http(f"http://127.0.0.1:{self.port}/json/list", 30))
        from websockets.sync.client import connect

        self.ws = connect(next(p for p in pages if p["type"] == "page")["webSocketDebuggerUrl"], max_size=2 ** 27)
        self.n = 0
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def call(self, method: str, **params) -> dict:
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.n:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def evaluate(self, js: str):
        return self.call("Runtime.evaluate", expression=js, returnByValue=True).get("result", {}).get("value")

    def close(self) -> None:
        self.ws.close()
        self.proc.terminate()
        self.proc.wait(timeout=10)


def adapt_runs(store: Path, model: str, targets: list[str]) -> None:
    for target in targets:
        for weights in WEIGHTS:
            print(f"adapt {model} on {target}, weights={weights}", file=sys.stderr, flush=True)
            plan, error = run_adapt([f"model={model}", f"target={target}", f"weights={weights}", *QUICK,
                                     f"paths.artifacts={store}"])
            if plan is None:
                sys.exit(f"mlflow_screenshot: adapt of {model} on {target} failed: {error}")


def capture(store: Path, model: str, out: Path, binary: str, width: int, height: int) -> None:
    from mlflow.tracking import MlflowClient

    exp = MlflowClient(tracking_uri=f"sqlite:///{store}/mlflow.db").get_experiment_by_name(f"meta-infer/{model}")
    port = _free_port()
    ui = subprocess.Popen([sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", f"sqlite:///{store}/mlflow.db",
                           "--host", "127.0.0.1", "--port", str(port)], cwd=store,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    page = None
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_http(f"{base}/health", 120)
        page = DevTools(binary, width, height, str(store / "chromium-profile"))
        url = f"{base}/#/experiments/{exp.experiment_id}/runs?workflowType=machine_learning"
        page.call("Page.enable")
        page.call("Page.navigate", url=url)
        key = f'MLflowLocalStorage-1.1-ExperimentPage-["{exp.experiment_id}"]-ReactComponentState'
        state = None
        for _ in range(60):         # the page writes its view state once it has loaded
            time.sleep(0.5)
            state = page.evaluate(f"localStorage.getItem({json.dumps(key)})")
            if state:
                break
        view = json.loads(state) if state else {}
        view.update(selectedColumns=list(COLUMNS)[1:], columnOrder=list(COLUMNS), columnWidths=COLUMNS)
        page.evaluate(f"localStorage.setItem({json.dumps(key)}, {json.dumps(json.dumps(view))});"
                      "localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false');"
                      "localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');")
        page.call("Page.reload", ignoreCache=True)
        time.sleep(8)               # the runs table fetches and renders
        png = base64.b64decode(page.call("Page.captureScreenshot", format="png")["data"])
    finally:
        if page is not None:
            page.close()
        ui.terminate()
        ui.wait(timeout=20)
    out.parent.mkdir(parents=True, exist_ok=True)
    raw = store / "raw.png"
    raw.write_bytes(png)
    from PIL import Image

    Image.open(raw).convert("RGB").quantize(colors=64).save(out, optimize=True)
    print(f"screenshot: {out} ({out.stat().st_size // 1024} KB)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="mlp", help="a zoo model (default mlp)")
    ap.add_argument("--targets", default="cpu,fpga", help="comma-separated targets (default cpu,fpga)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "images" / "mlflow_runs.png")
    ap.add_argument("--chromium", help="the Chromium binary (default: chromium on PATH)")
    ap.add_argument("--size", default="1600x480", help="viewport WIDTHxHEIGHT in pixels")
    a = ap.parse_args()
    binary = _chromium(a.chromium)
    width, height = (int(v) for v in a.size.split("x"))
    with tempfile.TemporaryDirectory(prefix="metainfer-mlflow-shot-") as tmp:
        store = Path(tmp)
        adapt_runs(store, a.model, a.targets.split(","))
        capture(store, a.model, a.out.resolve(), binary, width, height)


if __name__ == "__main__":
    main()
