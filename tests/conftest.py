"""Shared fixtures: settings composed from the real conf/ tree, isolated per test under
tmp_path, and a runner for the command-line flows."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from _pytest.nodeid import NodeId

from subprocess_env import flow_env

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def settings_for(tmp_path):
    """settings_for("target=fpga", ...) -> validated Settings writing under tmp_path."""
    from app.compose import load_settings

    def make(*overrides: str):
        s, _ = load_settings([f"paths.artifacts={tmp_path}", *overrides])
        return s

    return make


class FlowResult:
    def __init__(self, proc: subprocess.CompletedProcess):
        self.returncode, self.stdout, self.stderr = proc.returncode, proc.stdout, proc.stderr

    @property
    def plan_path(self) -> Path:
        last = self.stdout.strip().splitlines()[-1]
        assert last.startswith("plan: "), self.stdout
        return Path(last.removeprefix("plan: "))

    @property
    def plan(self) -> dict:
        return json.loads(self.plan_path.read_text())


# what a flow does before its first stage on first use of paths.artifacts (app/stores.py): the
# MLflow, fingerprint-library and Prefect schemas created, the temporary server started and stopped
_MIGRATE = """
import contextlib, sys
import prefect  # noqa: F401  (imported, as by every flow: the embedded run starts its temporary server)
from app import stores
from app.compose import load_settings
s, _ = load_settings(sys.argv[1:])
stores.check(s)
with contextlib.ExitStack() as stack:
    stores.prepare(s, stack)
"""


def _run_temp(tmp_path_factory) -> Path:
    """The folder of this run shared by its workers (under pytest-xdist, each worker's basetemp is
    a folder in it), else the session's basetemp."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if "PYTEST_XDIST_WORKER" in os.environ else base


_SESSION: dict = {}     # this process's migrated store ("migrated": its folder) and Prefect server ("server")


def _migrated_store_of(config) -> Path:
    """Made once per run (the migrations take tens of seconds): the first worker that needs it
    migrates, under a lock, and the others copy its folder."""
    if "migrated" not in _SESSION:
        shared = _run_temp(config._tmp_path_factory)
        folder, done = shared / "migrated" / "artifacts", shared / "migrated" / "done"
        with open(shared / "migrated.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not done.exists():
                shutil.rmtree(folder, ignore_errors=True)       # a worker that failed half-way
                proc = subprocess.run([sys.executable, "-c", _MIGRATE, f"paths.artifacts={folder}"], cwd=ROOT,
                                      env=flow_env(), capture_output=True, text=True, timeout=300)
                assert proc.returncode == 0, proc.stderr[-3000:]
                done.touch()
        _SESSION["migrated"] = folder
    return _SESSION["migrated"]


def _prefect_api_of(config) -> str:
    """This worker's Prefect server (see prefect_api), started on first use."""
    if "server" not in _SESSION:
        from app.prefect_server import TemporaryServer

        server = TemporaryServer(str(config._tmp_path_factory.mktemp("prefect-api") / "prefect"))
        server.start()      # (stops what it started when it fails)
        _SESSION["server"] = server
    return _SESSION["server"].api_url


def pytest_sessionfinish(session):
    server = _SESSION.pop("server", None)
    if server is not None:
        server.stop()


@pytest.fixture(scope="session")
def _migrated_store(request) -> Path:
    return _migrated_store_of(request.config)


@pytest.fixture(scope="session")
def migrated(_migrated_store):
    """migrated(folder) -> folder holding a copy of stores a first run has migrated: for a test
    whose flow runs start in an empty paths.artifacts but check nothing of the first use (the
    migrations cost more than a small run; first use is test_faults.py's and test_flow_cwd.py's),
    the folder then is as after a run that wrote nothing else."""
    def copy(folder: Path) -> Path:
        shutil.copytree(_migrated_store, folder, dirs_exist_ok=True)
        return folder

    return copy


@pytest.fixture(scope="session")
def prefect_api(request) -> str:
    """The API URL of a Prefect server for this worker's flow runs (app/prefect_server.py's, with
    its home under the session's tmp dir), started on first use and stopped with the session: a
    flow run named a server by PREFECT_API_URL starts none of its own (the README's "Against a
    Prefect server"), which saves every run the server's start-up (seconds of CPU: Prefect's server
    imports). The runs that check the temporary server itself (test_faults.py, test_flow_cwd.py,
    run_flow(..., own_server=True)) start theirs as a user's run does."""
    return _prefect_api_of(request.config)


@pytest.fixture
def run_flow(request):
    """run_flow("adapt", "target=cpu", ...) runs `python flows/<name>.py` as a user would, against
    this worker's Prefect server (prefect_api); own_server=True: with the temporary server the
    run starts itself, its flow runs in paths.artifacts/prefect/prefect.db."""
    def run(name: str, *args: str, timeout: int = 600, own_server: bool = False) -> FlowResult:
        env = flow_env(None if own_server else request.getfixturevalue("prefect_api"))
        proc = subprocess.run([sys.executable, str(ROOT / "flows" / f"{name}.py"), *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout)
        return FlowResult(proc)

    return run


# --- running the suite on several workers (pytest-xdist, `-n` in pyproject's addopts) -------------

TESTS = Path(__file__).resolve().parent


def pytest_configure(config):
    config.addinivalue_line("markers", "alone: measures wall time or timing-sensitive figures; under pytest-xdist no "
                                       "other test runs while it does")


PER_WORKER = {"_migrated_store", "migrated", "prefect_api"}      # cheap enough to make once on each worker


def _shared_fixtures(item) -> list:
    """The module- or session-scoped fixtures defined in tests/ that `item` uses."""
    info = getattr(item, "_fixtureinfo", None)
    out = []
    for defs in (info.name2fixturedefs.values() if info else ()):
        for d in defs:
            code = getattr(d.func, "__code__", None)
            if d.scope in ("session", "package", "module") and d.argname not in PER_WORKER and code \
                    and Path(code.co_filename).is_relative_to(TESTS):
                out.append(d)
    return out


def _groups(items) -> dict:
    """item -> its xdist group: the tests that use a costly fixture shared by several tests (module
    or session scope, defined here in tests/) run on the worker that holds that fixture: one group
    per session fixture, else per module; the other `alone` tests form one group, so that they run
    one after the other (see pytest_runtest_protocol)."""
    out = {}
    for item in items:
        shared = _shared_fixtures(item)
        if shared:
            session = sorted(d.argname for d in shared if d.scope != "module")
            out[item] = session[0] if session else item.module.__name__
        elif item.get_closest_marker("alone"):
            out[item] = "alone"
    return out


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under `--dist loadgroup` (before xdist's own hook, which reads the marks): each test of a
    group is marked with it, and the order that xdist hands out the groups and tests (in collection
    order: pyproject's addopts turn its reordering by size off) is: the `alone` group first, while
    the other worker starts, then the groups and tests marked `slow`, the rest last, so the run does
    not end on one long test; within a group its `alone` tests come first, back to back."""
    groups = _groups(items)
    worker = "PYTEST_XDIST_WORKER" in os.environ and bool(config.getoption("loadgroup", False))      # set on workers
    if worker:      # (in one process the collection order stays: a module's tests stay together)
        rank = {}
        for item in items:
            group = groups.get(item, item.nodeid)
            slow = item.get_closest_marker("slow") is not None
            rank[group] = min(rank.get(group, 2), 0 if group == "alone" else 1 if slow else 2)
        position = {item: i for i, item in enumerate(items)}
        items.sort(key=lambda it: (rank[groups.get(it, it.nodeid)], it.get_closest_marker("alone") is None,
                                   position[it]))
    for item, group in groups.items():
        item.add_marker(pytest.mark.xdist_group(group))
        if worker and not item.nodeid.endswith(f"@{group}"):
            # xdist 3.8 appends "@group" to item._nodeid, which pytest 9 no longer reads (a node's id
            # is item._id): without the suffix loadgroup would hand each test out on its own
            item._id = NodeId.parse(f"{item.nodeid}@{group}")


_held = None        # (gate, lock): held exclusively from one `alone` test to the next on this worker
_prepared = False   # this worker's shared services made (_prepare)

def _prepare(item, gate, lock) -> None:
    """Under pytest-xdist, before a worker's first test: the migrated store and the worker's
    Prefect server, when the run's tests use them, made holding the run's lock shared, as a test
    does: both workers make theirs side by side, the migration (a child process, waited for in a
    thread) beside the server's start (in the main thread: the server asks to die with the thread
    that started it), and an `alone` test waits; instead of the first test that needs them doing
    it, often an `alone` one, while the other worker waits idle. A failure is left to the
    fixture, which raises it in the test that needs it."""
    used = set().union(*(getattr(i, "fixturenames", ()) for i in item.session.items))
    store, server = used & {"migrated", "_migrated_store"}, used & {"prefect_api", "run_flow"}
    if not (store or server):
        return
    fcntl.flock(gate, fcntl.LOCK_EX)
    fcntl.flock(lock, fcntl.LOCK_SH)
    fcntl.flock(gate, fcntl.LOCK_UN)
    migrating = threading.Thread(target=_quietly, args=(_migrated_store_of, item.config)) if store else None
    try:
        if migrating:
            migrating.start()
        if server:
            _quietly(_prefect_api_of, item.config)
    finally:
        if migrating:
            migrating.join()
        fcntl.flock(lock, fcntl.LOCK_UN)


def _quietly(make, config) -> None:
    try:
        make(config)
    except Exception:  # noqa: BLE001 - raised again by the fixture, in a test
        pass


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under pytest-xdist: an `alone` test holds the run's lock exclusively, every other test shares
    it (around its whole set-up, call and tear-down, module fixtures included). The gate gives an
    `alone` test that waits priority over the next shared ones; consecutive `alone` tests of one
    worker keep both, so that the other worker's next test does not slip in between them."""
    global _held, _prepared
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return (yield)
    alone = item.get_closest_marker("alone") is not None
    if _held:
        gate, lock = _held
    else:
        folder = item.config._tmp_path_factory.getbasetemp().parent      # one per run, shared by its workers
        gate, lock = open(folder / "tests.gate", "a+"), open(folder / "tests.lock", "a+")
        if not _prepared:
            _prepared = True
            _prepare(item, gate, lock)
        fcntl.flock(gate, fcntl.LOCK_EX)
        if alone:
            fcntl.flock(lock, fcntl.LOCK_EX)
        else:
            fcntl.flock(lock, fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)
    try:
        return (yield)
    finally:
        if alone and nextitem is not None and nextitem.get_closest_marker("alone"):
            _held = (gate, lock)
        else:
            _held = None
            for fh in (lock, gate):
                fcntl.flock(fh, fcntl.LOCK_UN)
                fh.close()
