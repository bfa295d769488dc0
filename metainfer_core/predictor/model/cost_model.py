"""The learned cost model: kernel-level CatBoost (log latency and log peak memory per kernel,
from the fingerprint library's micro-benchmarks) plus a model-level correction learned from
whole-model runs (launch overheads, fusion, host/device transfers), so that a plan's
predicted latency matches a whole-graph run rather than the sum of standalone kernels.

Saved per fingerprint version as numbered revisions (store.PredictorStore) with metadata:
training-set size, validation metrics, where it came from (trained, fine-tuned)."""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx

from metainfer_core.errors import MetaInferError
from metainfer_core.ir.kernels import Kernel, group_kernels
from metainfer_core.ir.tensors import TensorInfo, tensor_infos
from metainfer_core.predictor.dataset import in_graph
from metainfer_core.predictor.features import plan_features
from metainfer_core.predictor.features.plan_graph import describe_kernels
from metainfer_core.predictor.features.target_join import TargetSpec, record_descriptor
from metainfer_core.predictor.lifecycle.store import PredictorStore
from metainfer_core.predictor.model.correction import Correction
from metainfer_core.predictor.model.kernel_model import LATENCY_PARAMS, KernelModel
from metainfer_core.predictor.model.labels import latency_ms

MIN_RECORDS = 8


@dataclass
class PredictorMeta:
    fingerprint_version: str
    n_records: int              # kernel records learned from
    val_mape: float             # kernel level: held-out fifth of the records, or the left-out models' kernels
    train_s: float
    n_plan_runs: int = 0        # whole-model runs the correction learned from
    last_run_id: int = 0        # the newest library run learned from (fine-tunes take newer ones)
    revision: int = 0
    parent: int | None = None   # the revision this one was fine-tuned from
    kind: str = "trained"       # trained | fine_tuned | recalibrated
    target: str = ""
    spec: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)   # e.g. leave-one-model-out figures
    created_at: str = ""        # UTC

    @property
    def id(self) -> str:
        return f"{self.fingerprint_version}/r{self.revision}"


def kernel_rows(records: list[dict], spec: TargetSpec | None = None
                ) -> tuple[list[dict], np.ndarray, np.ndarray | None]:
    """(kernel descriptors, latency ms (labels.latency_ms), peak bytes or None) of library records."""
    feats = [record_descriptor(r) for r in records]
    ms = np.array([max(latency_ms(r, spec), 1e-6) for r in records])
    mem = [r.get("peak_mem_bytes") for r in records]
    peak = np.array(mem, dtype=np.float64) if all(m is not None and m > 0 for m in mem) else None
    return feats, ms, peak


class CostModel:
    def __init__(self, kernels: KernelModel, correction: Correction, meta: PredictorMeta):
        self.kernels, self.correction, self.meta = kernels, correction, meta

    @property
    def spec(self) -> TargetSpec:
        return self.kernels.spec

    # ---- training ---------------------------------------------------------------------
    @staticmethod
    def train(records: list[dict], fingerprint_version: str, seed: int = 0, spec: TargetSpec | None = None,
              plan_runs: list[dict] | None = None, params: dict | None = None, ridge: float = 1e-3,
              validate: bool = True) -> "CostModel":
        if len(records) < MIN_RECORDS:
            raise MetaInferError(f"Only {len(records)} fingerprint records for {fingerprint_version}; the predictor "
                                 f"needs at least {MIN_RECORDS}. Run the profile stage on a larger model first.")
        t0 = time.perf_counter()
        spec = spec or TargetSpec()
        params = dict(params or LATENCY_PARAMS, random_seed=seed)
        feats, ms, peak = kernel_rows(records, spec)
        mape = float("nan")
        if validate:       # kernel-level check on a random fifth, before the final fit on all
            val = np.random.default_rng(seed).random(len(records)) < 0.2
            if val.any() and (~val).sum() >= MIN_RECORDS:
                probe = KernelModel.fit([f for f, v in zip(feats, val) if not v], ms[~val], spec, params=params)
                pred = probe.predict_ms([f for f, v in zip(feats, val) if v])
                mape = float(np.mean(np.abs(pred - ms[val]) / ms[val]))
        runs = [r for r in (plan_runs or []) if r.get("graph", {}).get("kernels")]
        km = KernelModel.fit(feats, ms, spec, peak, params=params, in_graph=in_graph.training_rows(runs))
        correction = fit_correction(km, runs, ridge)
        metrics = {}
        if runs:   # the ratio drift checks compare against (calibration.check)
            y = np.array([r["median_ms"] for r in runs])
            metrics["calibration_ratio"] = float(np.median(y / predict_runs(km, correction, runs)))
            metrics["correction_terms"] = correction.active
        meta = PredictorMeta(fingerprint_version, len(records), mape, time.perf_counter() - t0, len(plan_runs or []),
                             last_run_id=max((r.get("id") or 0 for r in plan_runs or []), default=0),
                             target=spec.name, spec=spec.as_dict(), metrics=metrics,
                             created_at=time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()))
        return CostModel(km, correction, meta)

    def recalibrated(self, plan_runs: list[dict], ridge: float = 1e-3) -> "CostModel":
        """This kernel model with the correction fitted again on `plan_runs` (new whole-model
        runs arrived: verify and deployments append them)."""
        runs = [r for r in plan_runs if r.get("graph", {}).get("kernels")]
        correction = fit_correction(self.kernels, runs, ridge)
        metrics = {k: v for k, v in self.meta.metrics.items() if not k.startswith("lomo")}
        if runs:
            y = np.array([r["median_ms"] for r in runs])
            metrics["calibration_ratio"] = float(np.median(y / predict_runs(self.kernels, correction, runs)))
            metrics["correction_terms"] = correction.active
        meta = PredictorMeta(**{**self.meta.__dict__, "parent": self.meta.revision, "kind": "recalibrated",
                                "n_plan_runs": len(plan_runs), "metrics": metrics,
                                "last_run_id": max((r.get("id") or 0 for r in plan_runs), default=0),
                                "created_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())})
        return CostModel(self.kernels, correction, meta)

    # ---- prediction -------------------------------------------------------------------
    def predict_kernels_ms(self, kernels: list[Kernel]) -> np.ndarray:
        """Latency of each kernel of a graph: inside it for a contextual kernel model (one that
        learned in-graph times), else standalone (what a micro-benchmark would measure)."""
        if not kernels:
            return np.zeros(0)
        return self.predict_graph_kernels_ms(describe_kernels(kernels))

    def predict_graph_kernels_ms(self, graph: dict) -> np.ndarray:
        return self.kernels.predict_many([graph["kernels"]])[0]

    def predict_graph_ms(self, graph: dict, kernel_ms: np.ndarray | None = None) -> float:
        """Whole-model latency of a described plan (plan_graph): kernels plus correction."""
        if not graph["kernels"]:
            return 0.0
        kernel_ms = self.predict_graph_kernels_ms(graph) if kernel_ms is None else kernel_ms
        x = plan_features.matrix([graph], [kernel_ms], self.spec)
        return float(self.correction.apply(x)[0])

    def predict_ms(self, kernels: list[Kernel], infos: dict[str, TensorInfo] | None = None) -> float:
        """Whole-model latency of a graph given as its kernels (the search's call). With the
        graph's tensor infos the prediction also sees signed int8 activations."""
        if not kernels:
            return 0.0
        return self.predict_graph_ms(describe_kernels(kernels, infos))

    def predict_model_ms(self, model: onnx.ModelProto) -> float:
        infos = tensor_infos(model)
        return self.predict_ms(group_kernels(model, infos), infos)

    def predict_kernels_peak_bytes(self, kernels: list[Kernel]) -> np.ndarray | None:
        if not kernels:
            return np.zeros(0)
        return self.kernels.predict_peak_bytes(describe_kernels(kernels)["kernels"])

    # ---- persistence ------------------------------------------------------------------
    def save(self, folder: Path) -> int:
        """Save as a new revision of the store at `folder`; returns the revision number."""
        store = PredictorStore(folder)
        parent = store.path(self.meta.parent) if self.meta.kind == "recalibrated" and self.meta.parent else None
        rev, path = store.new_revision_path()
        self.meta.revision = rev
        if parent is None or not _link_kernels(parent, path):
            self.kernels.save(path)
        (path / "correction.json").write_text(json.dumps(self.correction.as_dict(), indent=2))
        (path / "meta.json").write_text(json.dumps(asdict(self.meta), indent=2, default=_json_default))
        return rev

    @staticmethod
    def load(folder: Path, revision: int | None = None) -> "CostModel":
        store = PredictorStore(folder)
        rev = revision if revision is not None else store.current()
        if rev is None or rev not in store.revisions():
            raise MetaInferError(f"No predictor revision {rev if rev is not None else '(current)'} in {folder}; "
                                 f"saved revisions: {store.revisions() or 'none'}. Train one with flows/train.py.")
        path = store.path(rev)
        meta = PredictorMeta(**json.loads((path / "meta.json").read_text()))
        spec = TargetSpec.from_dict(meta.spec) if meta.spec else TargetSpec()
        correction = Correction.from_dict(json.loads((path / "correction.json").read_text()))
        return CostModel(KernelModel.load(path, spec), correction, meta)


def predict_runs(km: KernelModel, correction: Correction, runs: list[dict]) -> np.ndarray:
    """Whole-model predictions for stored runs (one batched kernel prediction)."""
    if not runs:
        return np.zeros(0)
    preds = km.predict_many([r["graph"]["kernels"] for r in runs])
    return correction.apply(plan_features.matrix([r["graph"] for r in runs], preds, km.spec))


def fit_correction(km: KernelModel, runs: list[dict], ridge: float) -> Correction:
    if not runs:
        return Correction.identity()
    preds = km.predict_many([r["graph"]["kernels"] for r in runs])
    X = plan_features.matrix([r["graph"] for r in runs], preds, km.spec)
    return Correction.fit(X, np.array([latency_ms(r, km.spec) for r in runs]), [r["model"] for r in runs], ridge)


def load_or_train(records: list[dict], fingerprint_version: str, folder: Path, seed: int = 0, *,
                  spec: TargetSpec | None = None, plan_runs: list[dict] | None = None, params: dict | None = None,
                  ridge: float = 1e-3) -> tuple[CostModel, bool]:
    """Re-use the current revision when it learned from exactly these records and runs;
    else train anew and make that the current revision. Returns (model, trained_now)."""
    store = PredictorStore(folder)
    runs = plan_runs or []
    if store.current() is not None:
        cm = CostModel.load(folder)
        if cm.meta.fingerprint_version == fingerprint_version and cm.meta.n_records == len(records):
            if cm.meta.n_plan_runs == len(runs):
                return cm, False
            cm = cm.recalibrated(runs, ridge)       # only whole-model runs were added: the kernels stand
            rev = cm.save(folder)
            store.set_current(rev)
            store.log("recalibrated", revision=rev, parent=cm.meta.parent, n_plan_runs=len(runs))
            return cm, True
    cm = CostModel.train(records, fingerprint_version, seed, spec=spec, plan_runs=runs, params=params, ridge=ridge)
    rev = cm.save(folder)
    store.set_current(rev)
    store.log("trained", revision=rev, n_records=cm.meta.n_records, n_plan_runs=cm.meta.n_plan_runs)
    return cm, True


def _link_kernels(parent: Path, path: Path) -> bool:
    """A recalibrated revision keeps its parent's kernel model: hard links to the parent's files
    (a revision per verified run would otherwise copy ~1 MB of trees each time)."""
    files = sorted(parent.glob("kernel_*"))
    if not any(f.name == "kernel_latency.cbm" for f in files):
        return False
    try:
        for f in files:
            os.link(f, path / f.name)
    except OSError:             # a file system without hard links: save a copy instead
        for f in files:
            (path / f.name).unlink(missing_ok=True)
        return False
    return True


def _json_default(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if hasattr(x, "item"):
        return x.item()
    return str(x)
