"""The run's stores, ready before the first stage: paths.artifacts writable, the SQLite
databases readable, their schemas created or migrated once, and (embedded) the temporary Prefect
server up.

Migrations happen under an exclusive lock on paths.artifacts/.stores.lock: adapts started
together into an empty folder would otherwise race on Alembic's version table (Prefect, MLflow)
or on CREATE TABLE. Once done, .stores.lock records the library versions that migrated the
stores, and later runs of those versions skip the lock."""
from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from app.settings import RunSettings
from metainfer_core.errors import MetaInferError

LOCK_NAME = ".stores.lock"


HOLDS = {"tracking.mlflow_uri": "the past MLflow runs and the registry's active plans",
         "tracking.fingerprint_db": "the measured kernels: the next runs measure them again",
         "tracking.prefect_home": "the Prefect flow-run history"}


def check_writable(artifacts: Path) -> None:
    """paths.artifacts exists or can be made, and a file can be created in it."""
    try:
        artifacts.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=artifacts, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise MetaInferError(
            f"paths.artifacts={artifacts} cannot be written ({exc.strerror or exc}"
            f"{': ' + exc.filename if exc.filename and str(exc.filename) != str(artifacts) else ''}). Every file a "
            "run writes goes there: pass a folder you can write to (paths.artifacts=<folder>), or fix its "
            "permissions or mount.") from None


def sqlite_file(url: str) -> Path | None:
    """The file of a sqlite:/// URL (SQLAlchemy or MLflow style), else None."""
    for prefix in ("sqlite+aiosqlite:///", "sqlite:///"):
        if url.startswith(prefix):
            return Path(url.removeprefix(prefix).split("?", 1)[0])
    return None


def check_sqlite(path: Path, setting: str) -> None:
    """An existing database file opens and passes SQLite's quick integrity check."""
    if not path.is_file():
        return
    problem = None
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=30)) as conn:
            rows = conn.execute("PRAGMA quick_check").fetchall()
        if rows != [("ok",)]:     # one line per damaged page: the first says enough
            lines = [line for r in rows for line in str(r[0]).splitlines() if line and not line.startswith("***")]
            problem = f"{lines[0] if lines else 'integrity check failed'}; {len(lines)} problems in all"
    except sqlite3.DatabaseError as exc:
        problem = str(exc)
    if problem:
        raise MetaInferError(
            f"{path} ({setting}) is not a usable SQLite database ({problem}). Restore it from a backup, or move it "
            f"aside (mv {path} {path}.broken) and run again to start an empty one there (without {HOLDS[setting]}).")


def databases(s: RunSettings) -> list[tuple[Path, str]]:
    """The SQLite files this run's stores use, with the setting that names each."""
    out = []
    for url, setting in ((s.tracking.mlflow_uri, "tracking.mlflow_uri"),
                         (s.tracking.fingerprint_db, "tracking.fingerprint_db")):
        path = sqlite_file(url)
        if path is not None:
            out.append((path, setting))
    if not s.deploy.prefect_api_url:
        out.append((Path(s.tracking.prefect_home) / "prefect.db", "tracking.prefect_home"))
    return out


def _versions() -> str:
    import mlflow
    import prefect

    return f"prefect {prefect.__version__}, mlflow {mlflow.__version__}, fingerprint schema 1\n"


@contextlib.contextmanager
def first_use(artifacts: Path) -> Iterator[bool]:
    """Held while the stores are migrated; yields False (and takes no lock) when this version's
    migrations are already done."""
    lock = artifacts / LOCK_NAME
    try:
        done = lock.read_text() == _versions()
    except OSError:
        done = False
    if done:
        yield False
        return
    with open(lock, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)      # released when the file closes, also when the process dies
        try:
            fh.seek(0)
            if fh.read() == _versions():    # another run migrated while this one waited
                yield False
                return
            yield True
            fh.seek(0)
            fh.truncate()
            fh.write(_versions())
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def migrate(s: RunSettings) -> None:
    """Create or upgrade the MLflow and fingerprint schemas (each is a no-op when current)."""
    from mlflow.tracking import MlflowClient

    from metainfer_core.fingerprint.library import FingerprintLibrary

    MlflowClient(tracking_uri=s.tracking.mlflow_uri).search_experiments(max_results=1)
    FingerprintLibrary(s.tracking.fingerprint_db)


def check(s: RunSettings) -> None:
    """Refuse, before anything is written, an artifacts folder that cannot be written or a
    damaged database file."""
    check_writable(Path(s.paths.artifacts))
    for path, setting in databases(s):
        check_sqlite(path, setting)


def _needs_temporary_server(s: RunSettings) -> bool:
    """A flow that uses Prefect (flows/rollback.py and flows/gc.py never import it) without a
    Prefect API of its own: deploy.prefect_api_url, or PREFECT_API_URL from the environment or
    the Prefect profile (a worker running a deployment; `--serve` under `prefect server start`)."""
    if "prefect" not in sys.modules or s.deploy.prefect_api_url:
        return False
    from prefect.settings import get_current_settings

    return not (os.environ.get("PREFECT_API_URL") or get_current_settings().api.url)


def prepare(s: RunSettings, stack: contextlib.ExitStack) -> str | None:
    """Migrate and (embedded) start the temporary Prefect server, stopped when `stack`
    closes. Returns that server's API URL, or None when a Prefect server is configured."""
    from app.prefect_server import TemporaryServer

    artifacts = Path(s.paths.artifacts)
    server = TemporaryServer(s.tracking.prefect_home) if _needs_temporary_server(s) else None
    with first_use(artifacts) as fresh:
        if fresh:
            migrate(s)
            if server is not None:      # its start-up runs Prefect's migrations
                stack.enter_context(server)
    if server is not None and not fresh:
        stack.enter_context(server)
    return server.api_url if server is not None else None

