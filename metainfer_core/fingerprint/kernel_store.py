"""The standalone ONNX model of every measured kernel, keyed like its records, so a kernel can
be measured again later (re-profiling after a firmware change, drift checks) without the model
it was cut from."""
from __future__ import annotations

import onnx
from sqlalchemy import LargeBinary, String, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, Session, mapped_column

from metainfer_core.fingerprint.library import Base, FingerprintLibrary


class KernelModelRow(Base):
    __tablename__ = "kernel_models"
    kernel_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    onnx: Mapped[bytes] = mapped_column(LargeBinary)


def _ensure(lib: FingerprintLibrary) -> None:
    KernelModelRow.__table__.create(lib.engine, checkfirst=True)


def save_kernels(lib: FingerprintLibrary, models: dict[str, onnx.ModelProto]) -> None:
    """Store kernels not stored yet; a kernel another writer stored meanwhile is skipped."""
    _ensure(lib)
    with Session(lib.engine) as s:
        have = set(s.scalars(select(KernelModelRow.kernel_key).where(KernelModelRow.kernel_key.in_(list(models)))))
        for k, m in models.items():
            if k in have:
                continue
            try:
                with s.begin_nested():
                    s.add(KernelModelRow(kernel_key=k, onnx=m.SerializeToString()))
            except IntegrityError:
                pass
        s.commit()


def load_kernels(lib: FingerprintLibrary, keys: list[str]) -> dict[str, onnx.ModelProto]:
    _ensure(lib)
    out = {}
    with Session(lib.engine) as s:
        for i in range(0, len(keys), 500):
            for row in s.scalars(select(KernelModelRow).where(KernelModelRow.kernel_key.in_(keys[i:i + 500]))):
                out[row.kernel_key] = onnx.load_from_string(row.onnx)
    return out
