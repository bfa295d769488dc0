"""A mailbox for verifying plans on another host: the hosts of a fleet share the fingerprint
library's database but no filesystem, so the plans to verify (ONNX bytes of the default plan
and the candidates) and the validation inputs travel through two side tables of that database,
keyed by a request id, and the measurements come back the same way (the tables and their SQL:
fingerprint/verify_queue.py).

The requester (adapt, where the user is) writes a request; the host that has the device reads
it, times the plans with metainfer_core.verify.measure.verify on its backend and writes the result
(each plan's Verified figures, the outputs the target produced on the validation inputs, and
who ran it); the requester reads the result, computes the accuracy loss of each plan from those
outputs with its own loss function (the metric and any labels stay where the user is), and
deletes the request. SQLite for tests, PostgreSQL for a fleet."""
from __future__ import annotations

import io
import json
from dataclasses import dataclass

import numpy as np
import onnx
from metainfer_core.backends.base import Backend
from metainfer_core.errors import MetaInferError
from metainfer_core.fingerprint import verify_queue as queue
from metainfer_core.fingerprint.library import FingerprintLibrary
from metainfer_core.verify.measure import Outputs, Verified, VerifyResult, run_plans

Feeds = list[dict[str, np.ndarray]]


@dataclass
class VerifyRequest:
    request_id: str
    target: str
    models: list[tuple[str, onnx.ModelProto]]
    feeds: Feeds
    runs: int
    warmup: int


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _unnpz(data: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _pack_feeds(feeds: Feeds) -> bytes:
    """Arrays keyed a0, a1, ... (input names may hold any character), with their layout."""
    arrays, layout = {}, []
    for feed in feeds:
        names = []
        for name, arr in feed.items():
            arrays[f"a{len(arrays)}"] = np.asarray(arr)
            names.append(name)
        layout.append(names)
    arrays["layout"] = np.frombuffer(json.dumps(layout).encode(), dtype=np.uint8)
    return _npz(arrays)


def _unpack_feeds(data: bytes) -> Feeds:
    arrays = _unnpz(data)
    layout, i, feeds = json.loads(arrays.pop("layout").tobytes().decode()), 0, []
    for names in layout:
        feed = {}
        for name in names:
            feed[name] = arrays[f"a{i}"]
            i += 1
        feeds.append(feed)
    return feeds


def _pack_outputs(outputs: dict[str, Outputs]) -> bytes:
    arrays, layout = {}, {}
    for label, samples in outputs.items():
        layout[label] = [len(sample) for sample in samples]
        for sample in samples:
            for out in sample:
                arrays[f"a{len(arrays)}"] = np.asarray(out)
    arrays["layout"] = np.frombuffer(json.dumps(layout).encode(), dtype=np.uint8)
    return _npz(arrays)


def _unpack_outputs(data: bytes) -> dict[str, Outputs]:
    arrays = _unnpz(data)
    layout, i, out = json.loads(arrays.pop("layout").tobytes().decode()), 0, {}
    for label, counts in layout.items():
        samples = []
        for n in counts:
            samples.append([arrays[f"a{i + j}"] for j in range(n)])
            i += n
        out[label] = samples
    return out


def put_request(lib: FingerprintLibrary, target: str, models: list[tuple[str, onnx.ModelProto]], feeds: Feeds,
                runs: int, warmup: int) -> str:
    """Store the plans to verify and the validation inputs; returns the request id."""
    return queue.put_request(lib, target, runs, warmup, _pack_feeds(feeds),
                             [(label, m.SerializeToString()) for label, m in models])


def get_request(lib: FingerprintLibrary, request_id: str) -> VerifyRequest:
    row = queue.get_request(lib, request_id)
    if row is None:
        raise MetaInferError(f"No verify request {request_id!r} in the fingerprint library at {lib.engine.url}: "
                             "the requester and this host must share tracking.fingerprint_db (the same "
                             "PostgreSQL).")
    return VerifyRequest(request_id, row.target, [(label, onnx.load_from_string(data)) for label, data in row.models],
                         _unpack_feeds(row.feeds), row.runs, row.warmup)


def put_result(lib: FingerprintLibrary, request_id: str, result: VerifyResult) -> None:
    payload = {"results": [dict(r.as_dict(), samples_ms=list(r.samples_ms)) for r in result.results],
               "worker": result.worker}
    if not queue.put_result(lib, request_id, json.dumps(payload, allow_nan=True), _pack_outputs(result.outputs)):
        raise MetaInferError(f"Verify request {request_id!r} is gone from the fingerprint library (the requester "
                             "gave up on it): its result is not stored.")


def get_result(lib: FingerprintLibrary, request_id: str) -> VerifyResult | None:
    """The result, or None while the request has none (or is gone)."""
    stored = queue.get_result(lib, request_id)
    if stored is None:
        return None
    payload = json.loads(stored[0])
    results = [Verified(**r) for r in payload["results"]]
    return VerifyResult(results, _unpack_outputs(stored[1]) if stored[1] else {}, payload.get("worker", {}))


def delete_request(lib: FingerprintLibrary, request_id: str) -> None:
    queue.delete_request(lib, request_id)


def measure(backend: Backend, request: VerifyRequest) -> VerifyResult:
    """Run the request's plans on `backend` with the same run_plans() adapt runs locally, keeping
    the outputs the target produced (the accuracy loss is computed by the requester)."""
    return run_plans(backend, request.models, request.feeds, request.runs, request.warmup)
