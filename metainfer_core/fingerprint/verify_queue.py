"""The verify mailbox's two side tables in the fingerprint library's database (the one store the
hosts of a fleet share): a request (target, rounds, the validation inputs as bytes) with its
plans (ONNX bytes, in order), and its result (JSON and the target's outputs as bytes) once the
host with the device wrote it. Rows and bytes only: verify/mailbox.py packs and reads them."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy import DateTime, Integer, LargeBinary, String, Text, delete, func, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from metainfer_core.fingerprint.library import Base, FingerprintLibrary


class VerifyRequestRow(Base):
    __tablename__ = "verify_requests"
    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    target: Mapped[str] = mapped_column(String(64))
    runs: Mapped[int] = mapped_column(Integer)
    warmup: Mapped[int] = mapped_column(Integer)
    feeds: Mapped[bytes] = mapped_column(LargeBinary)                     # npz (verify/mailbox.py)
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
class StoredRequest:
    target: str
    runs: int
    warmup: int
    feeds: bytes
    models: list[tuple[str, bytes]]       # (label, ONNX bytes), in order


def _ensure(lib: FingerprintLibrary) -> None:
    for table in (VerifyRequestRow.__table__, VerifyModelRow.__table__):
        table.create(lib.engine, checkfirst=True)


def put_request(lib: FingerprintLibrary, target: str, runs: int, warmup: int, feeds: bytes,
                models: list[tuple[str, bytes]]) -> str:
    """Store a request; returns its id."""
    _ensure(lib)
    request_id = uuid.uuid4().hex
    with Session(lib.engine) as s:
        s.add(VerifyRequestRow(request_id=request_id, target=target, runs=runs, warmup=warmup, feeds=feeds,
                               created_at=datetime.now(timezone.utc)))
        s.add_all(VerifyModelRow(request_id=request_id, idx=i, label=label, onnx=data)
                  for i, (label, data) in enumerate(models))
        s.commit()
    return request_id


def get_request(lib: FingerprintLibrary, request_id: str) -> StoredRequest | None:
    _ensure(lib)
    with Session(lib.engine) as s:
        row = s.get(VerifyRequestRow, request_id)
        if row is None:
            return None
        models = [(m.label, m.onnx) for m in s.scalars(select(VerifyModelRow).where(
            VerifyModelRow.request_id == request_id).order_by(VerifyModelRow.idx))]
        return StoredRequest(row.target, row.runs, row.warmup, row.feeds, models)


def put_result(lib: FingerprintLibrary, request_id: str, result: str, outputs: bytes) -> bool:
    """Store the result; False where the request is gone (the requester gave up on it)."""
    _ensure(lib)
    with Session(lib.engine) as s:
        row = s.get(VerifyRequestRow, request_id)
        if row is None:
            return False
        row.result, row.outputs, row.finished_at = result, outputs, datetime.now(timezone.utc)
        s.commit()
    return True


def get_result(lib: FingerprintLibrary, request_id: str) -> tuple[str, bytes | None] | None:
    """(result JSON, outputs) or None while the request has none (or is gone)."""
    _ensure(lib)
    with Session(lib.engine) as s:
        row = s.get(VerifyRequestRow, request_id)
        return None if row is None or row.result is None else (row.result, row.outputs)


def delete_request(lib: FingerprintLibrary, request_id: str) -> None:
    _ensure(lib)
    with Session(lib.engine) as s:
        s.execute(delete(VerifyModelRow).where(VerifyModelRow.request_id == request_id))
        s.execute(delete(VerifyRequestRow).where(VerifyRequestRow.request_id == request_id))
        s.commit()


def pending(lib: FingerprintLibrary) -> int:
    """Requests in the mailbox (a finished run leaves none)."""
    _ensure(lib)
    with Session(lib.engine) as s:
        return int(s.scalar(select(func.count()).select_from(VerifyRequestRow)))
