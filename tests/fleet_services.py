"""Real fleet services for the tests, on loopback with free ports and temporary folders:
PostgreSQL (initdb + pg_ctl), a Prefect server and Prefect process workers. Each is a context
manager that stops what it started, even when the test fails.

PostgreSQL refuses to run as root: as root, the cluster belongs to `nobody` and its commands
run through runuser. Binaries are found on PATH or under /usr/lib/postgresql/*/bin; without
them the fleet tests skip, unless METAINFER_REQUIRE_FLEET=1 (set by .ci/run) makes that a failure."""
from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PG_USER = "nobody"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pg_bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if found is None:
        msg = (f"PostgreSQL's {name} is not installed (apt-get install postgresql, or put its bin folder on PATH); "
               "the fleet tests need a real PostgreSQL")
        if os.environ.get("METAINFER_REQUIRE_FLEET") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return found


def _as_db_user(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", PG_USER, "--", *cmd] if os.geteuid() == 0 else cmd


def _stop_group(proc: subprocess.Popen, timeout: float = 15) -> None:
    """Stop a process we started (and the children it started) by its own process group id."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)
    except ProcessLookupError:
        pass


class Postgres:
    """A throw-away PostgreSQL cluster: trust auth on 127.0.0.1 only, fsync off (tests)."""

    def __init__(self):
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="metainfer-pg-"))
        self.data = self.dir / "data"
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def __enter__(self) -> "Postgres":
        if os.geteuid() == 0:
            shutil.chown(self.dir, PG_USER)
        try:
            subprocess.run(_as_db_user([pg_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                                        "-E", "UTF8", "--no-sync"]), check=True, capture_output=True, timeout=120)
            subprocess.run(_as_db_user([pg_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "log"), "-w",
                                        "-t", "60", "-o", f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
                                        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off", "start"]),
                           check=True, capture_output=True, timeout=90)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        if (self.data / "postmaster.pid").exists():
            subprocess.run(_as_db_user([pg_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"]),
                           capture_output=True, timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


class PrefectServer:
    """`prefect server start` on a free loopback port with its own PREFECT_HOME (SQLite)."""

    def __init__(self, home: Path):
        self.port = free_port()
        self.home = home
        self.api_url = f"http://127.0.0.1:{self.port}/api"
        self.env = dict(os.environ, PREFECT_HOME=str(home), PREFECT_API_URL=self.api_url,
                        PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_UI_ENABLED="false",
                        PREFECT_LOGGING_LEVEL="WARNING")
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "PrefectServer":
        self.home.mkdir(parents=True, exist_ok=True)
        log = open(self.home / "server.log", "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                                      "--port", str(self.port)], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Prefect server exited: {(self.home / 'server.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.api_url}/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        self.__exit__(None, None, None)
        raise RuntimeError("the Prefect server did not answer /api/health within 120 s")

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            _stop_group(self.proc)

    def worker(self, pool: str, log: Path) -> subprocess.Popen:
        """One process worker polling `pool`, as on the host that has that device."""
        return subprocess.Popen([sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type",
                                 "process", "--name", f"worker-{pool}", "--limit", "1"],
                                cwd=ROOT, env=self.env, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                                start_new_session=True)


stop = _stop_group
