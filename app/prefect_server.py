"""The temporary Prefect server of an embedded run, started by us rather than by Prefect.

Prefect's own ephemeral server is a plain child in the terminal's process group: Ctrl-C kills it
mid-run (the flow engine then retries reporting to it for a minute), and a SIGTERM or SIGKILL of
the run leaves it listening on loopback with every run's parameters. This one runs in its own
session (a terminal's Ctrl-C reaches only the run, which then reports its end to a live server),
is asked by the kernel to exit when the run's process dies (PR_SET_PDEATHSIG, even on SIGKILL),
and is stopped, with its process group, on every exit path of the run."""
from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

# The server's first act: ask the kernel for SIGTERM when its parent (the run) dies, then become
# uvicorn. Done in the child's own interpreter, not in a preexec_fn: code between fork and exec
# in a process with threads can deadlock on a lock another thread held at the fork.
_DIE_WITH_PARENT = ("import ctypes, os, signal, sys\n"
                    "try: ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG (Linux)\n"
                    "except (OSError, AttributeError): pass\n"
                    "if os.getppid() != int(sys.argv[1]): sys.exit(0)  # the run died before that\n"
                    "os.execv(sys.argv[2], sys.argv[2:])")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class TemporaryServer:
    """`with TemporaryServer(home) as api_url:` a Prefect API on 127.0.0.1 with its database in `home`."""

    def __init__(self, home: str, startup_timeout_s: float = 90.0):
        self.home = Path(home)
        self.timeout_s = startup_timeout_s
        self.process: subprocess.Popen | None = None
        self.api_url = ""

    def __enter__(self) -> str:
        self.start()
        return self.api_url

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        import prefect

        env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
        env.update(PREFECT_HOME=str(self.home), PREFECT_UI_ENABLED="0", PREFECT__SERVER_EPHEMERAL="1",
                   PREFECT__SERVER_FINAL="1")
        self.home.mkdir(parents=True, exist_ok=True)
        log = self.home / "server.log"
        atexit.register(self.stop)
        for _ in range(3):             # another process may take the free port before uvicorn binds it
            port = _free_port()
            with open(log, "wb") as out:
                self.process = subprocess.Popen(
                    [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()),
                     sys.executable, "-m", "uvicorn", "--app-dir", str(Path(prefect.__file__).parent.parent), "--factory", "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(port),
                     "--log-level", "error", "--lifespan", "on"],
                    env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True)
            self.api_url = f"http://127.0.0.1:{port}/api"
            if self._wait_healthy():
                return
            if self.process.poll() is None:
                break
        self.stop()
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
        raise RuntimeError(f"The temporary Prefect server did not start within {self.timeout_s:.0f} s "
                           f"({tail[0] if tail else 'no output'}; its log: {log}).")

    def _wait_healthy(self) -> bool:
        import httpx

        deadline = time.monotonic() + self.timeout_s
        with httpx.Client(timeout=5) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    return False
                try:
                    if client.get(f"{self.api_url}/health").status_code == 200:
                        return True
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        return False

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)      # its session: uvicorn and anything it started
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass
