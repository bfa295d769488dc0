"""Which (graph, action space, gradient) sets are already fully profiled under a fingerprint
version, so a later run on the same model and target skips building variants and cutting
kernels altogether (not only the measurements)."""
from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone

import onnx
from sqlalchemy import DateTime, Integer, String
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, Session, mapped_column

from metainfer_core.fingerprint.library import Base, FingerprintLibrary


class ProfiledSetRow(Base):
    __tablename__ = "profiled_sets"
    version: Mapped[str] = mapped_column(String(64), primary_key=True)
    set_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    kernels: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


def set_key(model: onnx.ModelProto, space: dict, batch_gradient: list[int]) -> str:
    h = hashlib.sha1(model.graph.SerializeToString(deterministic=True))
    h.update(json.dumps({"space": space, "gradient": batch_gradient}, sort_keys=True, default=str).encode())
    return h.hexdigest()[:32]


def profiled_kernels(lib: FingerprintLibrary, version: str, key: str) -> int | None:
    ProfiledSetRow.__table__.create(lib.engine, checkfirst=True)
    with Session(lib.engine) as s:
        row = s.get(ProfiledSetRow, (version, key))
        return row.kernels if row else None


def mark_profiled(lib: FingerprintLibrary, version: str, key: str, kernels: int) -> None:
    ProfiledSetRow.__table__.create(lib.engine, checkfirst=True)
    with Session(lib.engine) as s:
        s.add(ProfiledSetRow(version=version, set_key=key, kernels=kernels, created_at=datetime.now(timezone.utc)))
        try:
            s.commit()
        except IntegrityError:   # a concurrent run marked it first
            s.rollback()
