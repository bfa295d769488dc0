"""Hydra composition (Compose API, not @hydra.main: it would take over sys.argv and logging)
and validation into Settings. Every failure becomes one MetaInferError paragraph."""
from __future__ import annotations

import os
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from metainfer_core.errors import MetaInferError
from metainfer_core.settings import Settings, validate_settings

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ("model", "target", "action_space", "weights", "search", "tracking")


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def _explain(exc: Exception, overrides: list[str]) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    for group in GROUPS:
        for o in overrides:
            key, _, value = o.partition("=")
            if key.lstrip("+~") == group and value and value not in options(group):
                return (f"Unknown {group} option {value!r}. Available: {', '.join(options(group))} "
                        f"(files in conf/{group}/).")
    return f"Cannot compose the configuration from {overrides}: {text}. Overrides look like key=value " \
           f"(e.g. target=fpga weights=embedded model.path=net.onnx)."


def compose_raw(overrides: list[str]) -> dict:
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose("config", overrides=list(overrides))
        # absolute artifacts folder first, so every URI interpolated from it is absolute too
        cfg.paths.artifacts = os.path.abspath(cfg.paths.artifacts)
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        raise MetaInferError(_explain(exc, list(overrides))) from None
    finally:
        GlobalHydra.instance().clear()


def load_settings(overrides: list[str]) -> tuple[Settings, dict]:
    raw = compose_raw(overrides)
    return validate_settings(raw), raw
