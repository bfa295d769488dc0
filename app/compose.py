"""Hydra composition (Compose API, not @hydra.main: it would take over sys.argv and logging)
and validation into RunSettings. Every failure becomes one MetaInferError paragraph."""
from __future__ import annotations

import difflib
import os
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from app.settings import RunSettings, validate_settings
from metainfer_core.errors import MetaInferError

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ("model", "target", "action_space", "weights", "search", "tracking", "predictor", "serving", "deploy")
# Free-form mappings: an override replaces the whole mapping (Hydra would merge it into the
# default and, in struct mode, refuse keys the default lacks, e.g. a file model's input names;
# merged, 'target.spec.peak_gflops={}' would silently keep every default dtype).
REPLACED_MAPPINGS = ("model.input_shapes", "model.shape_range", "target.spec.op_slowdown", "target.spec.peak_gflops")


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def _did_you_mean(word: str, known) -> str:
    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def _known_keys(overrides: list[str]) -> set[str]:
    """Every dotted key of the configuration the overrides' group choices compose (empty if even
    that fails)."""
    pairs = [o.partition("=")[::2] for o in overrides]
    choices = [f"{g}={v}" for g, v in pairs if g in GROUPS and v in options(g)]
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            tree = OmegaConf.to_container(compose("config", overrides=choices), resolve=False)
    except (HydraException, OmegaConfBaseException, ValueError):
        return set()
    finally:
        GlobalHydra.instance().clear()
    keys, todo = set(), [("", tree)]
    while todo:
        prefix, node = todo.pop()
        for k, v in node.items():
            keys.add(prefix + str(k))
            if isinstance(v, dict):
                todo.append((f"{prefix}{k}.", v))
    return keys


def _explain(exc: Exception, overrides: list[str]) -> str:
    causes = [exc] + ([exc.__cause__] if exc.__cause__ else [])
    text = " ".join(str(c).strip().splitlines()[0].rstrip(".") for c in causes if str(c).strip()) or type(exc).__name__
    for group in GROUPS:
        for o in overrides:
            key, _, value = o.partition("=")
            if key.lstrip("+~") == group and value and value not in options(group):
                return (f"Unknown {group} option {value!r}.{_did_you_mean(value, options(group))} Available: "
                        f"{', '.join(options(group))} (files in conf/{group}/).")
    known = _known_keys(overrides)
    for o in overrides:
        key = o.partition("=")[0]
        if known and "=" in o and not key.startswith(("+", "~", "hydra.")) and key not in known:
            return (f"Unknown setting {key!r}: no config group or key has that name.{_did_you_mean(key, known)} "
                    "--help lists the groups and settings, --cfg job prints every key with its value "
                    "(add a new key on purpose with +key=value).")
    return f"Cannot compose the configuration from {overrides}: {text}. Overrides look like key=value " \
           f"(e.g. target=fpga weights=embedded model.path=net.onnx)."


def _split_mappings(overrides: list[str]) -> tuple[list[str], dict[str, object]]:
    plain, mappings = [], {}
    for o in overrides:
        key = o.partition("=")[0].lstrip("+")
        if key in REPLACED_MAPPINGS and "=" in o:
            mappings[key] = OverridesParser.create().parse_overrides([o.lstrip("+")])[0].value()
        else:
            plain.append(o)
    return plain, mappings


def compose_raw(overrides: list[str]) -> dict:
    GlobalHydra.instance().clear()
    try:
        plain, mappings = _split_mappings(list(overrides))
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose("config", overrides=plain)
        for key, value in mappings.items():
            OmegaConf.update(cfg, key, value, merge=False, force_add=True)
        # absolute artifacts folder first, so every URI interpolated from it is absolute too
        cfg.paths.artifacts = os.path.abspath(cfg.paths.artifacts)
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        raise MetaInferError(_explain(exc, list(overrides))) from None
    finally:
        GlobalHydra.instance().clear()


def load_settings(overrides: list[str]) -> tuple[RunSettings, dict]:
    raw = compose_raw(overrides)
    return validate_settings(raw), raw


def target_backend(name: str, **spec_changes):
    """conf/target/<name>.yaml's backend as an adapt with the defaults builds it (so with the
    serving group's threads on a host), `spec_changes` over its spec: for tests and benches that
    need a target outside a run."""
    from metainfer_core.backends import create_backend

    s, _ = load_settings([f"target={name}"])
    return create_backend(s.target.backend, s.target.name, s.target.measurement, {**s.target.spec, **spec_changes})


def zoo_input_shapes(names: list[str]) -> dict[str, dict[str, list[int]]]:
    """Each named zoo model's deployment shapes from conf/model/<name>.yaml (compose in the main
    thread: Hydra's compose is not thread-safe)."""
    return {n: compose_raw([f"model={n}"])["model"]["input_shapes"] for n in names}
