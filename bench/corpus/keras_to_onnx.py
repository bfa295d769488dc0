"""Converts a Keras .h5 model to ONNX the way its users do: load it with TensorFlow, save it as a
SavedModel called in inference mode, convert that with tf2onnx's command line. Runs inside the
conversion environment (bench/corpus/converting.py), never in meta-infer's: it imports only
TensorFlow, h5py and tf2onnx.

    python keras_to_onnx.py MODEL.h5 OUT.onnx --input NAME --opset 13

A GRU saved by a Keras that predates `reset_after` (Keras < 2.1.3: no such key in its config)
computed reset_after=False; today's Keras defaults to True and refuses its weights, so the
config is loaded with the value that Keras used."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def _old_grus_as_saved(config: dict) -> int:
    """Sets reset_after=False on every GRU config without the key (nested in wrappers); returns
    how many."""
    n = 0
    if isinstance(config, dict):
        if config.get("class_name") in ("GRU", "CuDNNGRU") and "reset_after" not in config.get("config", {}):
            config["config"]["reset_after"] = False
            n += 1
        for v in config.values():
            n += _old_grus_as_saved(v)
    elif isinstance(config, list):
        n += sum(_old_grus_as_saved(v) for v in config)
    return n


def load(path: Path):
    import h5py
    import tensorflow as tf

    with h5py.File(path, "r") as f:
        config = json.loads(f.attrs["model_config"])
    if _old_grus_as_saved(config):
        model = tf.keras.models.model_from_json(json.dumps(config))
        model.load_weights(str(path))
        return model
    return tf.keras.models.load_model(str(path), compile=False)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("h5", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--input", default="input")
    ap.add_argument("--opset", type=int, default=13)
    a = ap.parse_args(argv)
    import tensorflow as tf

    model = load(a.h5)
    spec = tf.TensorSpec(model.input_shape, tf.float32, name=a.input)
    call = tf.function(lambda x: model(x, training=False), input_signature=[spec])
    with tempfile.TemporaryDirectory(prefix="keras-savedmodel-") as tmp:
        tf.saved_model.save(model, tmp, signatures=call.get_concrete_function())
        return subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--saved-model", tmp, "--opset",
                               str(a.opset), "--output", str(a.out)]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
