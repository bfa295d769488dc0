"""Inputs users really get wrong (issue 30), one table: each is refused with MetaInferError (exit 2,
one paragraph that names what was wrong and says what to do, no traceback) by the settings,
before anything is written, or by normalize, before the run's MLflow run and run folder exist,
within seconds. The table is checked through those two functions directly; two runs of the flow
itself check that each kind of refusal leaves nothing behind (a valid tiny model that adapts is
in test_run_records.py)."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from metainfer_core.errors import MetaInferError
from metainfer_core.zoo import build
from subprocess_env import ROOT, flow_env


def _f(name, shape):
    return h.make_tensor_value_info(name, T.FLOAT, shape)


def _graph(nodes, inputs, outputs, inits=(), domains=()):
    m = h.make_model(h.make_graph(nodes, "g", inputs, outputs, list(inits)),
                     opset_imports=[h.make_opsetid("", 17), *[h.make_opsetid(d, 1) for d in domains]])
    m.ir_version = 8
    return m


# --- model files: each writer makes the file at `path` --------------------------------------

def _empty(path):
    path.write_bytes(b"")


def _truncated(path):
    path.write_bytes(build("mlp").SerializeToString()[:200])


def _not_onnx(path):
    path.write_text("this is not an onnx model\n")


def _custom_op(path):
    onnx.save(_graph([h.make_node("Relu", ["x"], ["r"], name="relu0"),
                      h.make_node("Frobnicate", ["r"], ["y"], name="frob1", domain="acme.ops")],
                     [_f("x", [1, 8])], [_f("y", [1, 8])], domains=["acme.ops"]), path)


def _dangling(path):     # written raw: onnx.save would not check, the loader must
    path.write_bytes(_graph([h.make_node("Add", ["x", "ghost"], ["y"], name="add1")],
                            [_f("x", [1, 8])], [_f("y", [1, 8])]).SerializeToString())


def _cycle(path):
    path.write_bytes(_graph([h.make_node("Add", ["x", "b"], ["a"], name="n1"), h.make_node("Relu", ["a"], ["b"], name="n2"),
                             h.make_node("Identity", ["a"], ["y"], name="out")],
                            [_f("x", [1, 8])], [_f("y", [1, 8])]).SerializeToString())


def _external_data_missing(path):
    m = _graph([h.make_node("MatMul", ["x", "W"], ["y"])], [_f("x", [1, 8])], [_f("y", [1, 8])],
               [nh.from_array(np.ones((8, 8), np.float32), "W")])
    onnx.save(m, path, save_as_external_data=True, location="weights.bin", size_threshold=0)
    (path.parent / "weights.bin").unlink()


def _symbolic(path):     # input 'x' [n, 16]: any batch binds, so only its size can be absurd
    onnx.save(_graph([h.make_node("MatMul", ["x", "W"], ["y"])], [_f("x", ["n", 16])], [_f("y", ["n", 4])],
                     [nh.from_array(np.ones((16, 4), np.float32), "W")]), path)


def _mlp(path):          # input 'input' [batch, 256]
    onnx.save(build("mlp"), path)


# --- data.inputs: each writer makes the samples file at `path` -------------------------------

def _samples(**arrays):
    def write(path):
        np.savez(path, **arrays)
    return write


GOOD = np.random.default_rng(0).standard_normal((3, 1, 256)).astype(np.float32)


def _with(value, at):
    arr = GOOD.copy()
    arr[at] = value
    return arr


def _npy(path):
    np.save(path, GOOD)


def _text(path):
    path.write_text("1 2 3\n")


M, S = "model", "samples"
# case -> (what to write: {"model": (file name, writer), "samples": (file name, writer)},
#          overrides ({model}, {samples}: the written files' paths), refused by, fragments the paragraph names)
CASES = {
    "model path missing": ({}, ["model=file", "model.path={tmp}/absent.onnx"], "settings", ["absent.onnx", "does not exist"]),
    "model path a directory": ({}, ["model=file", "model.path={tmp}"], "settings", ["is a directory", "an .onnx file"]),
    "model file empty": ({M: ("empty.onnx", _empty)}, ["model=file", "model.path={model}"], "normalize",
                         ["empty.onnx", "empty ONNX graph", "re-export"]),
    "model file truncated": ({M: ("trunc.onnx", _truncated)}, ["model=file", "model.path={model}"], "normalize",
                             ["trunc.onnx", "corrupt, truncated or not ONNX", "re-export"]),
    "model file not ONNX": ({M: ("text.onnx", _not_onnx)}, ["model=file", "model.path={model}"], "normalize",
                            ["text.onnx", "not a readable ONNX model", "re-export"]),
    "custom-domain op": ({M: ("custom.onnx", _custom_op)}, ["model=file", "model.path={model}"], "normalize",
                         ["'frob1'", "'Frobnicate'", "'acme.ops'", "re-export the model with standard ONNX ops"]),
    "dangling input": ({M: ("dangling.onnx", _dangling)}, ["model=file", "model.path={model}"], "normalize",
                       ["'add1'", "'ghost'", "which no node, graph input or initializer produces", "re-export"]),
    "cycle": ({M: ("cycle.onnx", _cycle)}, ["model=file", "model.path={model}"], "normalize",
              ["'n1'", "'n2'", "cycle", "re-export"]),
    "external data missing": ({M: ("ext.onnx", _external_data_missing)}, ["model=file", "model.path={model}"],
                              "normalize", ["'W'", "weights.bin", "does not exist", "copy the model's external-data"]),
    "input_shapes unknown input": ({M: ("mlp.onnx", _mlp)}, ["model=file", "model.path={model}",
                                                              "model.input_shapes={images:[1,256]}"],
                                   "normalize", ["'images'", "['input']", "use one of those names"]),
    "input_shapes wrong rank": ({M: ("mlp.onnx", _mlp)}, ["model=file", "model.path={model}",
                                                           "model.input_shapes={input:[1,256,1]}"],
                                "normalize", ["'input'", "rank 3", "give exactly 2 sizes"]),
    "input_shapes negative": ({M: ("mlp.onnx", _mlp)}, ["model=file", "model.path={model}",
                                                         "model.input_shapes={input:[-1,256]}"],
                              "settings", ["model.input_shapes.input=[-1, 256]", "positive integer"]),
    "input_shapes zero": ({M: ("mlp.onnx", _mlp)}, ["model=file", "model.path={model}", "model.input_shapes={input:[0,256]}"],
                          "settings", ["model.input_shapes.input=[0, 256]", "positive integer"]),
    "input_shapes absurdly large": ({M: ("tiny.onnx", _symbolic)}, ["model=file", "model.path={model}",
                                                                    "model.input_shapes={x:[100000000000,16]}"],
                                    "normalize", ["'x'", "[100000000000, 16]", "6,400,000,000,000 bytes", "of memory",
                                                  "Bind the deployment size"]),
    "input_shapes contradicts a static dim": ({M: ("mlp.onnx", _mlp)}, ["model=file", "model.path={model}",
                                                                        "model.input_shapes={input:[1,128]}"],
                                              "normalize", ["'input'", "size 128 on axis 1", "fixes that axis to 256"]),
    "unbound input on a static-shape target": ({M: ("mlp.onnx", _mlp)}, ["model=file", "model.path={model}", "target=npu"],
                                               "normalize", ["needs static shapes", "'input' ['batch', 256]",
                                                             "'model.input_shapes={input:[1,256]}'"]),
    "shape_range min above max": ({M: ("mlp.onnx", _mlp)}, ["model=file", "model.path={model}",
                                                           "model.shape_range={input:[[8,1],256]}"],
                                  "settings", ["model.shape_range.input axis 0", "min 8 above max 1", "[1, 8]"]),
    "shape_range unknown input": ({M: ("mlp.onnx", _mlp)}, ["model=file", "model.path={model}",
                                                           "model.shape_range={images:[1,256]}"],
                                  "normalize", ["model.shape_range", "'images'", "['input']"]),
    "shape_range contradicts a static dim": ({M: ("mlp.onnx", _mlp)}, ["model=file", "model.path={model}",
                                                                      "model.shape_range={input:[1,[128,512]]}"],
                                             "normalize", ["'input'", "axis 1", "fixes that axis to 256"]),
    "input_shapes outside shape_range": ({M: ("mlp.onnx", _mlp)}, ["model=file", "model.path={model}",
                                                                  "model.shape_range={input:[[1,8],256]}",
                                                                  "model.input_shapes={input:[16,256]}"],
                                         "normalize", ["model.input_shapes", "size 16 on axis 0", "[1, 8]"]),
    "data.inputs missing": ({}, ["model=mlp", "data.inputs={tmp}/absent.npz"], "settings", ["absent.npz", "does not exist"]),
    "data.inputs an .npy": ({S: ("s.npy", _npy)}, ["model=mlp", "data.inputs={samples}"], "settings",
                            ["s.npy", "an .npy file", "numpy.savez"]),
    "data.inputs not an .npz": ({S: ("s.txt", _text)}, ["model=mlp", "data.inputs={samples}"], "settings",
                                ["s.txt", "is not an .npz file", "numpy.savez"]),
    "data.inputs NaN": ({S: ("nan.npz", _samples(input=_with(np.nan, (1, 0, 5))))}, ["model=mlp", "data.inputs={samples}"],
                        "settings", ["nan.npz", "'input'", "1 NaN", "sample 1", "replace or drop"]),
    "data.inputs Inf": ({S: ("inf.npz", _samples(input=_with(np.inf, (2, 0, 0))))}, ["model=mlp", "data.inputs={samples}"],
                        "settings", ["inf.npz", "'input'", "1 Inf", "sample 2"]),
    "data.inputs wrong key": ({S: ("key.npz", _samples(images=GOOD))}, ["model=mlp", "data.inputs={samples}"], "normalize",
                              ["key.npz", "no array for model input(s) ['input']", "['images']", "keyed by the input's name"]),
    "data.inputs wrong shape": ({S: ("shape.npz", _samples(input=GOOD[:, :, :100]))}, ["model=mlp", "data.inputs={samples}"],
                                "normalize", ["'input'", "[1, 100]", "expects [1, 256]", "fix the .npz"]),
    "data.inputs zero samples": ({S: ("zero.npz", _samples(input=GOOD[:0]))}, ["model=mlp", "data.inputs={samples}"],
                                 "settings", ["zero.npz", "no sample", "[0, 1, 256]", "at least one sample"]),
    "data.inputs a dim of size 0": ({S: ("zerodim.npz", _samples(input=GOOD[:, :0]))}, ["model=mlp", "data.inputs={samples}"],
                                    "settings", ["zerodim.npz", "[3, 0, 256]", "size 0"]),
    "data.inputs strings": ({S: ("str.npz", _samples(input=np.array([["a"] * 256] * 3)))},
                            ["model=mlp", "data.inputs={samples}"], "settings", ["str.npz", "not numbers", "numeric arrays"]),
    "data.inputs complex": ({S: ("cplx.npz", _samples(input=GOOD.astype(np.complex64)))},
                            ["model=mlp", "data.inputs={samples}"], "settings", ["cplx.npz", "complex64", "imaginary part"]),
    "accuracy.max_loss negative": ({}, ["accuracy.max_loss=-0.1"], "settings", ["accuracy.max_loss", "greater than or equal to 0"]),
    "accuracy.max_loss not a number": ({}, ["accuracy.max_loss=abc"], "settings", ["accuracy.max_loss", "valid number"]),
    "accuracy.max_loss NaN": ({}, ["accuracy.max_loss=nan"], "settings", ["accuracy.max_loss", "finite number"]),
    "budget.total_s 0": ({}, ["budget.total_s=0"], "settings", ["budget.total_s", "greater than 0"]),
    "search.beam_width 0": ({}, ["search.beam_width=0"], "settings", ["search.beam_width", "greater than or equal to 1"]),
    "unknown config key": ({}, ["searhc.beam_width=2"], "settings", ["'searhc.beam_width'", "Did you mean 'search.beam_width'?"]),
}


def _overrides(case: str, tmp: Path) -> tuple[list[str], str, list[str]]:
    files, overrides, where, fragments = CASES[case]
    paths = {"tmp": str(tmp)}
    for key, (name, write) in files.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        write(tmp / name)
        paths[key] = str(tmp / name)
    for key, path in paths.items():
        overrides = [o.replace(f"{{{key}}}", path) for o in overrides]
    return overrides, where, fragments


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_refused_with_one_paragraph(tmp_path, case):
    from metainfer_core.backends import backend_for
    from metainfer_core.prepare.stage import prepare_stage
    from app.compose import load_settings

    overrides, where, fragments = _overrides(case, tmp_path)
    t0 = time.perf_counter()
    with pytest.raises(MetaInferError) as refused:
        s, _ = load_settings([f"paths.artifacts={tmp_path / 'artifacts'}", *overrides])
        assert where == "normalize", f"{case}: the settings accepted it"
        prepare_stage(s, backend_for(s).info.static_shapes, progress=lambda _msg: None)
    message = str(refused.value)
    assert "\n" not in message.strip() and len(message) < 800, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert time.perf_counter() - t0 < 30, f"{case}: refused only after {time.perf_counter() - t0:.0f} s"


# the two ways out of a flow run before anything is kept: the settings (nothing at all written) and
# normalize (the stores exist, but no MLflow run, registry version or run folder)
@pytest.mark.slow
@pytest.mark.parametrize("case", ["data.inputs NaN", "input_shapes absurdly large"])
def test_the_flow_exits_2_and_leaves_nothing_behind(tmp_path, case, prefect_api):
    overrides, where, fragments = _overrides(case, tmp_path)
    artifacts = tmp_path / "artifacts"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(ROOT / "flows" / "adapt.py"), *overrides, f"paths.artifacts={artifacts}"],
                          cwd=ROOT, env=flow_env(prefect_api), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and all(f in errors[0] for f in fragments), proc.stderr
    assert "Traceback" not in proc.stderr and "plan:" not in proc.stdout
    assert time.perf_counter() - t0 < 120
    if where == "settings":
        assert not artifacts.exists(), list(artifacts.rglob("*"))
        return
    assert not any((artifacts / "runs").glob("*"))
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{artifacts}/mlflow.db")
    experiments = client.search_experiments()
    assert not client.search_runs([e.experiment_id for e in experiments]) if experiments else True
    assert client.search_registered_models() == []
