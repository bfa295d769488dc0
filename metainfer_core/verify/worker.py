"""Measurement in a process of its own: the plans being compared, and nothing else of the run.

A timing whose result decides something (verify's rounds, the confirmation before a plan is
adopted) runs in a fresh Python process that holds only those plans: no search sessions or
OpenVINO compiled models with their worker threads, no logging or API threads of the flow, no
allocator history. The run waits blocked meanwhile. Why, and what was measured:
docs/decisions/2026-12-05-isolated-measurement.md.

The job travels pickled on the child's stdin (the backend as its recipe: class, name,
measurement, spec, seed; models as ONNX bytes; feeds as arrays) and the answer on a pipe the
child keeps for it (its stdout is pointed at stderr, so nothing a runtime prints can corrupt
it). A backend that cannot be rebuilt from its recipe (a modeled target: simulated latencies
do not depend on the process; a test's wrapper) is measured in this process, as before."""
from __future__ import annotations

import logging
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np
import onnx

from metainfer_core.backends.base import Backend
from metainfer_core.backends.timing import interleaved, settle_runs, warm_up
from metainfer_core.errors import MetaInferError
from metainfer_core.verify.measure import VerifyResult, run_plans

Feed = dict[str, np.ndarray]
_log = logging.getLogger(__name__)

CONFIRM_PROCESSES = 5     # a confirmation pools this many fresh processes, one after another...
CONFIRM_TIMED_S = 1.0     # ...each timing rounds for about this long...
CONFIRM_MIN_ROUNDS = 12   # ...never fewer rounds each (60 pooled: the bootstrap bound of the median ratio needs them)...
CONFIRM_MAX_ROUNDS = 100  # ...nor more
CONFIRM_MAX_S = 60.0      # a slow model gets fewer than CONFIRM_MIN_ROUNDS (never under 10) past this, all processes together
LOAD_TIMEOUT_S = 120.0    # a load job's worker: compiles and start-up, beyond its settings' serving time
LOAD_TRIES = 2            # a load whose worker hung is served once more in a fresh one before its settings fail
EXIT_WAIT_S = 30.0        # a worker that answered and does not exit within this (a runtime's thread stuck) is stopped


class WorkerTimedOut(MetaInferError):
    """The measurement worker did not answer in its time and was stopped (a runtime hung); `stacks`:
    where its threads stood when it was stopped."""

    def __init__(self, message: str, stacks: str = ""):
        super().__init__(message)
        self.stacks = stacks


def recipe(backend: Backend) -> tuple | None:
    """What rebuilds `backend` in another process, or None where it cannot be (or need not be)."""
    cls = type(backend)
    if getattr(backend, "measurement", None) != "measured" or not hasattr(backend, "spec"):
        return None
    if cls.__module__ in ("__main__", "builtins") or "<locals>" in cls.__qualname__:
        return None
    return f"{cls.__module__}.{cls.__qualname__}", backend.name, backend.measurement, dict(backend.spec), backend.seed


def _rebuild(r: tuple) -> Backend:
    from metainfer_core.backends import create_backend

    path, name, measurement, spec, seed = r
    return create_backend(path, name, measurement, spec, seed)


def _call(job: dict, timeout_s: float | None = None) -> object:
    """Run `job` in a fresh worker process; its answer, or a MetaInferError with its last words
    (or, past `timeout_s`, WorkerTimedOut with the worker's thread stacks, the worker stopped)."""
    read_fd, write_fd = os.pipe()
    with tempfile.TemporaryFile() as err:        # a file, not a pipe: a chatty runtime cannot block the child
        try:
            proc = subprocess.Popen([sys.executable, "-m", "metainfer_core.verify.worker", str(write_fd)],
                                    stdin=subprocess.PIPE, stderr=err, pass_fds=(write_fd,))
        finally:
            os.close(write_fd)
        with os.fdopen(read_fd, "rb") as answer:
            try:
                proc.stdin.write(pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL))
                proc.stdin.close()
            except BrokenPipeError:
                pass
            data = _read_all(answer, proc, timeout_s)      # until the child closes it (exits)
        if data is None:
            raise WorkerTimedOut(f"the measurement worker did not answer within {timeout_s:.0f} s and was stopped",
                                 _stacks(err))
        try:
            code = proc.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:           # answered, then stuck on its way out: the answer stands
            proc.kill()
            code = proc.wait()
            if data:
                return pickle.loads(data)
        if code == 0 and data:
            return pickle.loads(data)
        err.seek(0)
        last = [line for line in err.read().decode(errors="replace").splitlines() if line.strip()][-1:]
    raise MetaInferError(f"the measurement worker exited with code {code} ({(last or ['no output'])[0][:300]})")


def _read_all(answer, proc, timeout_s: float | None) -> bytes | None:
    """What the child writes until it closes its end; None (the child stopped, its thread stacks
    dumped first to its stderr) past `timeout_s`."""
    if timeout_s is None:
        return answer.read()
    import select

    chunks, end = [], time.monotonic() + timeout_s
    while True:
        left = end - time.monotonic()
        if left <= 0 or not select.select([answer], [], [], left)[0]:
            _stop(proc)
            return None
        chunk = os.read(answer.fileno(), 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _stop(proc) -> None:
    """Ask the worker for its threads' stacks (faulthandler, registered in main()), then kill it."""
    try:
        proc.send_signal(signal.SIGUSR1)
        proc.wait(2.0)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        pass
    proc.kill()
    proc.wait()


def _stacks(err) -> str:
    err.seek(0)
    text = err.read().decode(errors="replace")
    at = text.find("Thread 0x")
    return text[at:][-8000:] if at >= 0 else ""


def run_plans_isolated(backend: Backend, models: list[tuple[str, onnx.ModelProto]], feeds: list[Feed],
                       runs: int, warmup: int, time_left_s: float | None = None) -> VerifyResult:
    """verify/measure.Runner: run_plans() in a worker process of its own (where the backend can be
    rebuilt there; else here). A worker that dies (a runtime crashing on a plan) is not fatal: the
    plans are measured here instead, and the result says so."""
    r = recipe(backend)
    if r is None:
        return run_plans(backend, models, feeds, runs, warmup, time_left_s)
    t0 = time.perf_counter()
    try:
        result = _call({"job": "plans", "backend": r, "models": [(label, m.SerializeToString()) for label, m in models],
                        "feeds": feeds, "runs": runs, "warmup": warmup, "time_left_s": time_left_s})
    except MetaInferError as exc:
        left = None if time_left_s is None else max(time_left_s - (time.perf_counter() - t0), 0.0)
        result = run_plans(backend, models, feeds, runs, warmup, left)
        result.worker = {"isolated": False, "why": str(exc)}
        return result
    result.worker = {"isolated": True, **result.worker}
    return result


@dataclass
class PairTiming:
    """The default and one plan timed alone together: per-round samples (ms), paired; pooled over
    `processes` fresh processes (each one's median paired ratio plan / default in `process_ratios`)."""
    default_ms: list[float] = field(default_factory=list)
    plan_ms: list[float] = field(default_factory=list)
    seconds: float = 0.0
    isolated: bool = True
    error: str | None = None
    process_ratios: list[float] = field(default_factory=list)

    @staticmethod
    def pooled(parts: list[PairTiming]) -> PairTiming:
        """One timing of several processes' rounds (the first error, if any, ends it)."""
        out = PairTiming(isolated=all(p.isolated for p in parts))
        for p in parts:
            out.seconds += p.seconds
            if p.error:
                out.error = p.error
                break
            out.default_ms += p.default_ms
            out.plan_ms += p.plan_ms
            out.process_ratios += p.process_ratios or [float(np.median(np.asarray(p.plan_ms) / np.asarray(p.default_ms)))]
        return out


def time_pair(backend: Backend, default: onnx.ModelProto, plan: onnx.ModelProto, feed: Feed,
              max_s: float = CONFIRM_MAX_S) -> PairTiming:
    """The default and `plan` compiled in this process, warmed, then timed in alternating rounds
    (interleaved: the order swaps every round) as many as CONFIRM_TIMED_S allows, within
    [CONFIRM_MIN_ROUNDS, CONFIRM_MAX_ROUNDS] (fewer, never under 10, where max_s would be passed).
    One session each, the default's first, as a deployment compares them (no twin of the default
    as in verify's many-plan rounds: beside a plan on another runtime it favoured the default)."""
    t0 = time.perf_counter()
    try:
        first = backend.compile(default)
        other = backend.compile(plan)
        per_round_ms = warm_up(first, feed) + warm_up(other, feed)
    except Exception as exc:  # noqa: BLE001 - verify ran both already; a failure here means no confirmation
        return PairTiming(seconds=time.perf_counter() - t0, error=f"{type(exc).__name__}: {str(exc)[:300]}")
    settle = settle_runs(backend)
    per_round_ms *= 1 + settle
    rounds = int(min(CONFIRM_MAX_ROUNDS, max(CONFIRM_MIN_ROUNDS, CONFIRM_TIMED_S * 1e3 / per_round_ms)))
    rounds = max(10, min(rounds, int(max_s * 1e3 / per_round_ms)))
    a, b = interleaved([first, other], [feed] * 2, rounds, settle)
    return PairTiming(a, b, time.perf_counter() - t0)


def time_pair_isolated(backend: Backend, default: onnx.ModelProto, plan: onnx.ModelProto, feed: Feed,
                       max_s: float = CONFIRM_MAX_S, processes: int = CONFIRM_PROCESSES) -> PairTiming:
    """time_pair() in `processes` worker processes, one after another, each holding only those two
    plans, pooled (here, once, where the backend cannot be rebuilt). Several processes because one
    process's ratio lands a few % from the next one's (where its buffers fell, what the machine
    did meanwhile): pooled, the figure is the one a deployment meets on average, not one draw
    (docs/decisions/2026-12-06-pooled-confirmation.md)."""
    r = recipe(backend)
    if r is None:
        return PairTiming(**{**time_pair(backend, default, plan, feed, max_s).__dict__, "isolated": False})
    job = {"job": "pair", "backend": r, "default": default.SerializeToString(), "plan": plan.SerializeToString(),
           "feed": feed, "max_s": max_s / processes}
    parts = []
    for _ in range(processes):
        try:
            parts.append(_call(job))
        except MetaInferError as exc:
            parts.append(PairTiming(error=str(exc), isolated=True))
        if parts[-1].error:
            break
    return PairTiming.pooled(parts)


def serve_isolated(backend: Backend, models: list[tuple[str, onnx.ModelProto]], settings: dict[str, list[dict]],
                   feed: Feed, concurrency: int, duration_s: float) -> dict:
    """serving/measure.serve_all() in a worker process of its own holding only these plans (here
    where the backend cannot be rebuilt there, or where the worker dies: a runtime crashing)."""
    from metainfer_core.serving.load import WARM_S, LoadFigures
    from metainfer_core.serving.measure import serve_all

    r = recipe(backend)
    if r is not None:
        n = sum(len(v) for v in settings.values())
        job = {"job": "load", "backend": r, "feed": feed, "concurrency": concurrency,
               "models": [(label, m.SerializeToString()) for label, m in models],
               "settings": settings, "duration_s": duration_s}
        for attempt in range(1, LOAD_TRIES + 1):
            try:
                return _call(job, timeout_s=LOAD_TIMEOUT_S + n * (duration_s + WARM_S))
            except WorkerTimedOut as exc:       # hung: serving here would hang the run too
                _log.warning("serving worker hung (try %d of %d); its threads:\n%s", attempt, LOAD_TRIES,
                             exc.stacks or "(no stacks)")
                if attempt == LOAD_TRIES:
                    return {label: [LoadFigures(error=f"{exc} ({LOAD_TRIES} times)") for _ in settings[label]]
                            for label, _ in models}
            except MetaInferError:              # the worker died (a runtime crashing): served here instead
                break
    return serve_all(backend, models, settings, feed, concurrency, duration_s)


def _serve(job: dict) -> object:
    backend = _rebuild(job["backend"])
    if job["job"] == "load":
        from metainfer_core.serving.measure import serve_all

        models = [(label, onnx.load_from_string(data)) for label, data in job["models"]]
        return serve_all(backend, models, job["settings"], job["feed"], job["concurrency"], job["duration_s"])
    if job["job"] == "plans":
        models = [(label, onnx.load_from_string(data)) for label, data in job["models"]]
        result = run_plans(backend, models, job["feeds"], job["runs"], job["warmup"], job["time_left_s"])
        result.worker = {"pid": os.getpid()}
        return result
    if job["job"] == "pair":
        return time_pair(backend, onnx.load_from_string(job["default"]), onnx.load_from_string(job["plan"]),
                         job["feed"], job["max_s"])
    raise ValueError(f"unknown measurement job {job['job']!r}")


def main(argv: list[str]) -> int:
    import faulthandler

    faulthandler.register(signal.SIGUSR1, all_threads=True)     # where it stands, when stopped for hanging
    answer = os.fdopen(int(argv[1]), "wb")
    os.dup2(2, 1)               # whatever a runtime prints goes to stderr, never into the answer
    job = pickle.load(sys.stdin.buffer)
    from metainfer_core.verify import worker    # this module by its name: what it returns unpickles there

    result = worker._serve(job)
    answer.write(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
    answer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
