"""A mailbox for verifying plans on another host: the hosts of a fleet share the fingerprint
library's database but no filesystem, so the plans to verify (ONNX bytes of the default plan
and the candidates) and the validation inputs travel through two side tables of that database,
keyed by a request id, and the measurements come back the same way.

The requester (adapt, where the user is) writes a request; the host that has the device reads
it, times the plans with metainfer_core.verify.measure.verify on its backend and writes the result
(each plan's Verified figures, the outputs the target produced on the validation inputs, and
who ran it); the requester reads the result, computes the accuracy loss of each plan from those
outputs with its own loss function (the metric and any labels stay where the user is), and
deletes the request. Plain SQLAlchemy: SQLite for tests, PostgreSQL for a fleet."""
from __future__ import annotations

import io
import json
import math
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np
import onnx
from sqlalchemy import DateTime, Integer, LargeBinary, String, Text, delete, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from metainfer_core.accuracy.metric import LossFn
from metainfer_core.backends.base import Backend
from metainfer_core.errors import MetaInferError
from metainfer_core.fingerprint.library import Base, FingerprintLibrary
from metainfer_core.verify.measure import Verified, verify

Feeds = list[dict[str, np.ndarray]]
Outputs = list[list[np.ndarray]]         # outputs[sample][output]


class VerifyRequestRow(Base):
    __tablename__ = "verify_requests"
    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    target: Mapped[str] = mapped_column(String(64))
    runs: Mapped[int] = mapped_column(Integer)
    warmup: Mapped[int] = mapped_column(Integer)
    feeds: Mapped[bytes] = mapped_column(LargeBinary)                     # npz, see _pack_feeds
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    result: Mapped[str | None] = mapped_column(Text, nullable=True)       # JSON (NaN allowed: stored as text)
    outputs: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class VerifyModelRow(Base):
    __tablename__ = "verify_request_models"
    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    label: Mapped[str] = mapped_column(String(64))
    onnx: Mapped[bytes] = mapped_column(LargeBinary)


@dataclass
class VerifyRequest:
    request_id: str
    target: str
    models: list[tuple[str, onnx.ModelProto]]
    feeds: Feeds
    runs: int
    warmup: int


@dataclass
class VerifyResult:
    results: list[Verified]                 # aligned with the request's models
    outputs: dict[str, Outputs]             # label -> the target's outputs (plans that ran)
    worker: dict = field(default_factory=dict)


def _ensure(lib: FingerprintLibrary) -> None:
    for table in (VerifyRequestRow.__table__, VerifyModelRow.__table__):
        table.create(lib.engine, checkfirst=True)


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _unnpz(data: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _pack_feeds(feeds: Feeds) -> bytes:
    """Arrays keyed a0, a1, ... (input names may hold any character), with their layout."""
    arrays, layout = {}, []
    for feed in feeds:
        names = []
        for name, arr in feed.items():
            arrays[f"a{len(arrays)}"] = np.asarray(arr)
            names.append(name)
        layout.append(names)
    arrays["layout"] = np.frombuffer(json.dumps(layout).encode(), dtype=np.uint8)
    return _npz(arrays)


def _unpack_feeds(data: bytes) -> Feeds:
    arrays = _unnpz(data)
    layout, i, feeds = json.loads(arrays.pop("layout").tobytes().decode()), 0, []
    for names in layout:
        feed = {}
        for name in names:
            feed[name] = arrays[f"a{i}"]
            i += 1
        feeds.append(feed)
    return feeds


def _pack_outputs(outputs: dict[str, Outputs]) -> bytes:
    arrays, layout = {}, {}
    for label, samples in outputs.items():
        layout[label] = [len(sample) for sample in samples]
        for sample in samples:
            for out in sample:
                arrays[f"a{len(arrays)}"] = np.asarray(out)
    arrays["layout"] = np.frombuffer(json.dumps(layout).encode(), dtype=np.uint8)
    return _npz(arrays)


def _unpack_outputs(data: bytes) -> dict[str, Outputs]:
    arrays = _unnpz(data)
    layout, i, out = json.loads(arrays.pop("layout").tobytes().decode()), 0, {}
    for label, counts in layout.items():
        samples = []
        for n in counts:
            samples.append([arrays[f"a{i + j}"] for j in range(n)])
            i += n
        out[label] = samples
    return out


def put_request(lib: FingerprintLibrary, target: str, models: list[tuple[str, onnx.ModelProto]], feeds: Feeds,
                runs: int, warmup: int) -> str:
    """Store the plans to verify and the validation inputs; returns the request id."""
    _ensure(lib)
    request_id = uuid.uuid4().hex
    with Session(lib.engine) as s:
        s.add(VerifyRequestRow(request_id=request_id, target=target, runs=runs, warmup=warmup,
                               feeds=_pack_feeds(feeds), created_at=datetime.now(timezone.utc)))
        s.add_all(VerifyModelRow(request_id=request_id, idx=i, label=label, onnx=m.SerializeToString())
                  for i, (label, m) in enumerate(models))
        s.commit()
    return request_id


def get_request(lib: FingerprintLibrary, request_id: str) -> VerifyRequest:
    _ensure(lib)
    with Session(lib.engine) as s:
        row = s.get(VerifyRequestRow, request_id)
        if row is None:
            raise MetaInferError(f"No verify request {request_id!r} in the fingerprint library at {lib.engine.url}: "
                                 "the requester and this host must share tracking.fingerprint_db (the same "
                                 "PostgreSQL).")
        models = [(m.label, onnx.load_from_string(m.onnx)) for m in
                  s.scalars(select(VerifyModelRow).where(VerifyModelRow.request_id == request_id)
                            .order_by(VerifyModelRow.idx))]
        return VerifyRequest(request_id, row.target, models, _unpack_feeds(row.feeds), row.runs, row.warmup)


def put_result(lib: FingerprintLibrary, request_id: str, result: VerifyResult) -> None:
    _ensure(lib)
    payload = {"results": [dict(r.as_dict(), samples_ms=list(r.samples_ms)) for r in result.results],
               "worker": result.worker}
    with Session(lib.engine) as s:
        row = s.get(VerifyRequestRow, request_id)
        if row is None:
            raise MetaInferError(f"Verify request {request_id!r} is gone from the fingerprint library (the requester "
                                 "gave up on it): its result is not stored.")
        row.result = json.dumps(payload, allow_nan=True)
        row.outputs = _pack_outputs(result.outputs)
        row.finished_at = datetime.now(timezone.utc)
        s.commit()


def get_result(lib: FingerprintLibrary, request_id: str) -> VerifyResult | None:
    """The result, or None while the request has none (or is gone)."""
    _ensure(lib)
    with Session(lib.engine) as s:
        row = s.get(VerifyRequestRow, request_id)
        if row is None or row.result is None:
            return None
        payload = json.loads(row.result)
        results = [Verified(**r) for r in payload["results"]]
        return VerifyResult(results, _unpack_outputs(row.outputs) if row.outputs else {}, payload.get("worker", {}))


def delete_request(lib: FingerprintLibrary, request_id: str) -> None:
    _ensure(lib)
    with Session(lib.engine) as s:
        s.execute(delete(VerifyModelRow).where(VerifyModelRow.request_id == request_id))
        s.execute(delete(VerifyRequestRow).where(VerifyRequestRow.request_id == request_id))
        s.commit()


class _Counted:
    """The backend, counting compile() calls: verify() compiles the plans in order and computes
    a plan's loss before it compiles the next, so the count names the plan whose outputs came."""

    def __init__(self, backend: Backend):
        self.backend, self.compiled = backend, 0

    @property
    def info(self):
        return self.backend.info

    def compile(self, model: onnx.ModelProto):
        self.compiled += 1
        return self.backend.compile(model)


def measure(backend: Backend, request: VerifyRequest) -> VerifyResult:
    """Run the request's plans on `backend` with the same verify() adapt runs locally, keeping
    the outputs the target produced (the accuracy loss is computed by the requester)."""
    counted, outputs = _Counted(backend), {}

    def capture(reference, produced) -> float:
        outputs[request.models[counted.compiled - 1][0]] = produced
        return float("nan")

    results = verify(counted, request.models, request.feeds, [], request.runs, request.warmup, capture)
    return VerifyResult(results, {r.label: outputs[r.label] for r in results if r.error is None})


def with_accuracy(result: VerifyResult, reference: Outputs, loss_fn: LossFn) -> list[Verified]:
    """The requester's side: each plan's accuracy loss from the target's outputs, as verify()
    computes it locally; a plan whose outputs the loss function rejects is rejected."""
    out = []
    for r in result.results:
        if r.error is None:
            try:
                r.accuracy_loss = loss_fn(reference, result.outputs[r.label])
            except Exception as exc:  # noqa: BLE001 - as in verify(): the plan is rejected, not the run
                r.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
                r.samples_ms, r.latency_ms, r.p90_ms, r.peak_mem_bytes = [], math.nan, math.nan, 0
        out.append(r)
    return out
