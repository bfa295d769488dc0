"""The fingerprint library unchanged on PostgreSQL: same schema, and concurrent writers from
several processes (as from several hosts) neither lose nor duplicate records."""
from __future__ import annotations

import multiprocessing as mp

import pytest

from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.fingerprint.profiler import profile
from metainfer_core.zoo import build

from twins import backend
from fleet_services import Postgres

pytestmark = pytest.mark.fleet


@pytest.fixture(scope="module")
def postgres():
    with Postgres() as pg:
        yield pg


def _profile(url: str, target: str, firmware: str | None) -> tuple[str, int, int]:
    kw = {"firmware": firmware} if firmware else {}
    rep = profile(backend(target, **kw), FingerprintLibrary(url), [build("mlp")], [1, 2], reps=3, warmup=0)
    return rep.fingerprint_version, rep.measured, rep.reused


def test_same_schema_as_sqlite(postgres, tmp_path):
    from sqlalchemy import inspect

    pg, lite = FingerprintLibrary(postgres.url), FingerprintLibrary(f"sqlite:///{tmp_path}/fp.db")
    def shape(lib):
        insp = inspect(lib.engine)
        return {t: sorted((c["name"], str(c["nullable"])) for c in insp.get_columns(t))
                for t in insp.get_table_names()}
    assert shape(pg) == shape(lite)
    assert {"fingerprint_versions", "fingerprint_records", "plan_runs"} <= set(shape(pg))
    assert [u["column_names"] for u in inspect(pg.engine).get_unique_constraints("fingerprint_records")] == \
        [["version", "kernel_key", "source"]]


def test_concurrent_processes_do_not_lose_or_duplicate(postgres, tmp_path):
    # no schema created beforehand: the writers also race to create it, as a fleet's first runs would
    ctx = mp.get_context("spawn")
    jobs = [(postgres.url, "gpu", None)] * 3 + [(postgres.url, "gpu", "sim-gpu-fw-9")] * 2
    with ctx.Pool(len(jobs)) as pool:
        results = pool.starmap(_profile, jobs)
    # the reference: the same profile, alone, into a fresh SQLite library
    ref_version, _, _ = _profile(f"sqlite:///{tmp_path}/ref.db", "gpu", None)
    expected = {r["kernel_key"] for r in FingerprintLibrary(f"sqlite:///{tmp_path}/ref.db").records(ref_version)}
    lib = FingerprintLibrary(postgres.url)
    assert len(lib.versions("gpu")) == 2 and ref_version in lib.versions("gpu")
    for version in {v for v, _, _ in results}:
        recs = lib.records(version)
        stored_new = sum(m for v, m, _ in results if v == version)   # what the writers report as newly stored
        assert {r["kernel_key"] for r in recs} == expected            # nothing lost
        assert len(recs) == len(expected) == stored_new > 0           # nothing stored twice, none counted twice
