"""The fingerprint library: measured kernel costs per target and fingerprint version, in any
SQLAlchemy database (SQLite file by default, PostgreSQL for a fleet).

A fingerprint version is derived from the target's name, firmware, driver and runtime; a new
version never overwrites an old one. Records are unique per (version, kernel key, source):
re-measuring the same kernel under the same version is a no-op, so concurrent profile runs
cannot duplicate records."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import (JSON, BigInteger, Boolean, DateTime, Float, Integer, String, Text, UniqueConstraint,
                        create_engine, event, select)
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from metainfer_core.backends.base import TargetInfo, Timing
from metainfer_core.errors import MetaInferError


class Base(DeclarativeBase):
    pass


class VersionRow(Base):
    __tablename__ = "fingerprint_versions"
    version: Mapped[str] = mapped_column(String(64), primary_key=True)
    target: Mapped[str] = mapped_column(String(64), index=True)
    measurement: Mapped[str] = mapped_column(String(16))
    firmware: Mapped[str] = mapped_column(String(256))
    driver: Mapped[str] = mapped_column(String(256))
    runtime: Mapped[str] = mapped_column(String(256))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class RecordRow(Base):
    __tablename__ = "fingerprint_records"
    __table_args__ = (UniqueConstraint("version", "kernel_key", "source", name="uq_record"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    version: Mapped[str] = mapped_column(String(64), index=True)
    target: Mapped[str] = mapped_column(String(64), index=True)
    kernel_key: Mapped[str] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(String(32))          # microbench | runtime
    op_type: Mapped[str] = mapped_column(String(128), index=True)
    dtype: Mapped[str] = mapped_column(String(32))
    layout: Mapped[str] = mapped_column(String(16))
    signature: Mapped[str] = mapped_column(Text)             # unbounded: PostgreSQL enforces VARCHAR lengths
    features: Mapped[dict] = mapped_column(JSON)
    median_ms: Mapped[float] = mapped_column(Float)
    p10_ms: Mapped[float] = mapped_column(Float)
    p90_ms: Mapped[float] = mapped_column(Float)
    reps: Mapped[int] = mapped_column(Integer)
    bandwidth_gbps: Mapped[float] = mapped_column(Float)
    peak_mem_bytes: Mapped[int] = mapped_column(BigInteger)  # 64-bit: PostgreSQL's INTEGER stops at 2 GiB
    fallback: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class PlanRunRow(Base):
    """A whole-model run of one plan (a zoo model's candidate plan measured offline, or a
    deployed/verified plan measured at runtime), with the plan's kernel graph so the
    predictor can learn from it without the ONNX file."""
    __tablename__ = "plan_runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    version: Mapped[str] = mapped_column(String(64), index=True)
    target: Mapped[str] = mapped_column(String(64), index=True)
    model: Mapped[str] = mapped_column(String(256), index=True)
    plan_key: Mapped[str] = mapped_column(String(64))
    label: Mapped[str] = mapped_column(String(2048))
    source: Mapped[str] = mapped_column(String(32))          # zoo | runtime
    graph: Mapped[dict] = mapped_column(JSON)
    median_ms: Mapped[float] = mapped_column(Float)
    p10_ms: Mapped[float] = mapped_column(Float)
    p90_ms: Mapped[float] = mapped_column(Float)
    reps: Mapped[int] = mapped_column(Integer)
    peak_mem_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    predicted_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    predictor: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ThreadRunRow(Base):
    """A graph timed whole at the request's threads (the reference version's) and at another
    count (this row's version), back to back: how the whole graph scales with threads, beside
    its kernels measured at both (fingerprint/thread_counts.py)."""
    __tablename__ = "thread_runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    version: Mapped[str] = mapped_column(String(64), index=True)
    reference: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(256))
    plan_key: Mapped[str] = mapped_column(String(64))
    median_ms: Mapped[float] = mapped_column(Float)
    reference_ms: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


@dataclass(frozen=True)
class PlanRun:
    """One whole-model measurement ready to store (see PlanRunRow)."""
    model: str
    plan_key: str
    label: str
    graph: dict
    timing: Timing
    source: str = "zoo"
    peak_mem_bytes: int | None = None
    predicted_ms: float | None = None
    predictor: str | None = None


@dataclass(frozen=True)
class Measurement:
    """One kernel measurement ready to store."""
    kernel_key: str
    op_type: str
    dtype: str
    layout: str
    signature: str
    features: dict
    timing: Timing
    bytes_moved: int
    source: str = "microbench"


class FingerprintLibrary:
    def __init__(self, url: str):
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        try:
            sqlite = url.startswith("sqlite")
            self.engine = create_engine(url, connect_args={"timeout": 30} if sqlite else {}, pool_pre_ping=not sqlite)
            if sqlite:
                event.listen(self.engine, "connect", _sqlite_pragmas)
            _create_schema(self.engine)
        except (OperationalError, ImportError) as exc:
            raise MetaInferError(f"Cannot open the fingerprint library at {url} ({exc.__class__.__name__}: {exc}). "
                                 "Check tracking.fingerprint_db in conf/tracking/.") from None

    def register_version(self, info: TargetInfo) -> str:
        with Session(self.engine) as s:
            if s.get(VersionRow, info.fingerprint_version) is None:
                s.add(VersionRow(version=info.fingerprint_version, target=info.name, measurement=info.measurement,
                                 firmware=info.firmware, driver=info.driver, runtime=info.runtime,
                                 created_at=datetime.now(timezone.utc)))
                try:
                    s.commit()
                except IntegrityError:   # another run registered it first
                    s.rollback()
        return info.fingerprint_version

    def known_keys(self, version: str, source: str | None = None) -> set[str]:
        """Kernel keys with a record under `version` (from any source unless one is named)."""
        q = select(RecordRow.kernel_key).where(RecordRow.version == version)
        if source is not None:
            q = q.where(RecordRow.source == source)
        with Session(self.engine) as s:
            return set(s.scalars(q))

    def add(self, info: TargetInfo, measurements: list[Measurement]) -> int:
        """Store measurements in one transaction; returns how many were new. When another
        writer stored some of the same kernels meanwhile, those are skipped one by one."""
        version = self.register_version(info)
        rows = [self._row(info, version, m) for m in measurements]
        try:
            with Session(self.engine) as s, s.begin():
                existing = set(s.execute(select(RecordRow.kernel_key, RecordRow.source)
                                         .where(RecordRow.version == version)).all())
                fresh = {(r.kernel_key, r.source): r for r in rows if (r.kernel_key, r.source) not in existing}
                s.add_all(fresh.values())
            return len(fresh)
        except IntegrityError:
            added = 0
            with Session(self.engine) as s:
                for m in measurements:
                    try:
                        with s.begin_nested():
                            s.add(self._row(info, version, m))
                        added += 1
                    except IntegrityError:
                        pass
                s.commit()
            return added

    @staticmethod
    def _row(info: TargetInfo, version: str, m: Measurement) -> RecordRow:
        t = m.timing
        return RecordRow(version=version, target=info.name, kernel_key=m.kernel_key, source=m.source,
                         op_type=m.op_type, dtype=m.dtype, layout=m.layout, signature=m.signature,
                         features=m.features, median_ms=t.median_ms, p10_ms=t.p10_ms, p90_ms=t.p90_ms,
                         reps=t.reps, bandwidth_gbps=m.bytes_moved / (t.median_ms * 1e6) if t.median_ms > 0 else 0.0,
                         peak_mem_bytes=t.peak_mem_bytes, fallback=t.fallback, created_at=datetime.now(timezone.utc))

    def records(self, version: str) -> list[dict]:
        with Session(self.engine) as s:
            rows = s.scalars(select(RecordRow).where(RecordRow.version == version).order_by(RecordRow.id))
            return [{"kernel_key": r.kernel_key, "op_type": r.op_type, "dtype": r.dtype, "features": r.features,
                     "median_ms": r.median_ms, "p10_ms": r.p10_ms, "p90_ms": r.p90_ms, "fallback": r.fallback,
                     "source": r.source, "signature": json.loads(r.signature)} for r in rows]

    def training_records(self, version: str) -> list[dict]:
        """records() plus each record's peak memory and row id (the predictor learns both)."""
        with Session(self.engine) as s:
            rows = s.scalars(select(RecordRow).where(RecordRow.version == version).order_by(RecordRow.id))
            return [{"id": r.id, "kernel_key": r.kernel_key, "op_type": r.op_type, "dtype": r.dtype,
                     "features": r.features, "median_ms": r.median_ms, "p10_ms": r.p10_ms, "p90_ms": r.p90_ms,
                     "peak_mem_bytes": r.peak_mem_bytes, "fallback": r.fallback, "source": r.source,
                     "signature": json.loads(r.signature)} for r in rows]

    def add_plan_runs(self, info: TargetInfo, runs: list[PlanRun]) -> int:
        """Store whole-model runs. Offline (source "zoo") runs are kept once per (model, plan)
        and version, like micro-benchmarks; runtime runs are all kept: each is a new
        observation of the deployed plan. Returns how many were stored."""
        version = self.register_version(info)
        with Session(self.engine) as s, s.begin():
            have = set(s.execute(select(PlanRunRow.model, PlanRunRow.plan_key)
                                 .where(PlanRunRow.version == version, PlanRunRow.source == "zoo")).all())
            rows = []
            for r in runs:
                if r.source == "zoo":
                    if (r.model, r.plan_key) in have:
                        continue
                    have.add((r.model, r.plan_key))
                t = r.timing
                rows.append(PlanRunRow(version=version, target=info.name, model=r.model, plan_key=r.plan_key,
                                       label=r.label[:2048], source=r.source, graph=r.graph, median_ms=t.median_ms,
                                       p10_ms=t.p10_ms, p90_ms=t.p90_ms, reps=t.reps, peak_mem_bytes=r.peak_mem_bytes,
                                       predicted_ms=r.predicted_ms, predictor=r.predictor,
                                       created_at=datetime.now(timezone.utc)))
            s.add_all(rows)
        return len(rows)

    def plan_runs(self, version: str, source: str | None = None, model: str | None = None) -> list[dict]:
        """Whole-model runs of one version, oldest first."""
        with Session(self.engine) as s:
            q = select(PlanRunRow).where(PlanRunRow.version == version).order_by(PlanRunRow.id)
            if source:
                q = q.where(PlanRunRow.source == source)
            if model:
                q = q.where(PlanRunRow.model == model)
            return [{"id": r.id, "model": r.model, "plan_key": r.plan_key, "label": r.label, "source": r.source,
                     "graph": r.graph, "median_ms": r.median_ms, "p10_ms": r.p10_ms, "p90_ms": r.p90_ms,
                     "reps": r.reps, "peak_mem_bytes": r.peak_mem_bytes, "predicted_ms": r.predicted_ms,
                     "predictor": r.predictor, "created_at": r.created_at} for r in s.scalars(q)]

    def add_thread_run(self, info: TargetInfo, reference: str, model: str, plan_key: str, median_ms: float,
                       reference_ms: float) -> None:
        version = self.register_version(info)
        with Session(self.engine) as s, s.begin():
            s.add(ThreadRunRow(version=version, reference=reference, model=model, plan_key=plan_key,
                               median_ms=median_ms, reference_ms=reference_ms, created_at=datetime.now(timezone.utc)))

    def thread_runs(self, version: str, reference: str, plan_key: str | None = None) -> list[dict]:
        """Whole-graph runs at `version` beside `reference`, oldest first (of one graph, if named)."""
        with Session(self.engine) as s:
            q = select(ThreadRunRow).where(ThreadRunRow.version == version, ThreadRunRow.reference == reference)
            if plan_key:
                q = q.where(ThreadRunRow.plan_key == plan_key)
            return [{"model": r.model, "plan_key": r.plan_key, "median_ms": r.median_ms,
                     "reference_ms": r.reference_ms} for r in s.scalars(q.order_by(ThreadRunRow.id))]

    def known_plans(self, version: str, source: str = "zoo") -> set[tuple[str, str]]:
        """(model, plan_key) pairs already measured for this version."""
        with Session(self.engine) as s:
            return set(s.execute(select(PlanRunRow.model, PlanRunRow.plan_key)
                                 .where(PlanRunRow.version == version, PlanRunRow.source == source)).all())

    def version_paths(self, target: str) -> list[tuple[str, str | None, str | None]]:
        """(version, runtime, driver) of the target's versions, oldest first."""
        with Session(self.engine) as s:
            return [tuple(r) for r in s.execute(select(VersionRow.version, VersionRow.runtime, VersionRow.driver)
                                                .where(VersionRow.target == target)
                                                .order_by(VersionRow.created_at)).all()]

    def versions(self, target: str | None = None) -> list[str]:
        with Session(self.engine) as s:
            q = select(VersionRow.version).order_by(VersionRow.created_at)
            if target:
                q = q.where(VersionRow.target == target)
            return list(s.scalars(q))


def _create_schema(engine, attempts: int = 5) -> None:
    # Hosts or workers starting at once race to create the tables; the loser's CREATE fails
    # (PostgreSQL: duplicate type/relation; SQLite: "table ... already exists", or "database is locked"
    # while the winner switches the new file to WAL) instead of waiting, so look again.
    for attempt in range(attempts):
        try:
            Base.metadata.create_all(engine)
            return
        except (IntegrityError, ProgrammingError, OperationalError) as e:
            lost_race = not isinstance(e, OperationalError) or any(
                m in str(e.orig) for m in ("already exists", "database is locked"))
            if not lost_race or attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    # WAL lets readers proceed while one writer commits; busy_timeout waits instead of failing
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()
