"""The flows' two flags besides overrides: `--help` (what the flow does, the config groups and
their options, how to override, examples) and `--cfg job` (print the composed configuration and
exit, Hydra's convention; overrides given with it are applied and validated)."""
from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from app.compose import CONF_DIR, GROUPS, compose_raw, options
from metainfer_core.errors import MetaInferError

HELP_FLAGS = ("--help", "-h")
CFG_FLAGS = ("--cfg", "-c")
EXAMPLES = ("target=fpga weights=embedded search=quick",
            "model=file model.path=net.onnx 'model.input_shapes={input:[1,3,224,224]}'",
            "accuracy.max_loss=0.005 budget.total_s=120 paths.artifacts=/tmp/run1",
            "target=npu --cfg job            (print the composed configuration, run nothing)")


def parse_flags(argv: list[str]) -> tuple[list[str], str | None]:
    """(the overrides, "help" | "cfg" | None). Any other flag is a MetaInferError."""
    overrides, request, i = [], None, 0
    while i < len(argv):
        a = argv[i]
        if a in HELP_FLAGS:
            request = request or "help"
        elif a in CFG_FLAGS or a.startswith("--cfg="):
            kind = a.partition("=")[2] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else "")
            i += 0 if "=" in a else 1
            if kind != "job":
                raise MetaInferError(f"--cfg takes 'job' (print the composed configuration), got "
                                     f"{kind or 'nothing'!r}: run with --cfg job [overrides]. The flows compose no "
                                     "Hydra job config of their own.")
            request = request or "cfg"
        elif a.startswith("-"):
            raise MetaInferError(f"Unknown flag {a!r}. The flows take key=value overrides (e.g. target=fpga "
                                 "search.beam_width=8), --help, and --cfg job to print the composed configuration.")
        else:
            overrides.append(a)
        i += 1
    return overrides, request


def composed_yaml(raw: dict) -> str:
    return OmegaConf.to_yaml(OmegaConf.create(raw)).rstrip()


def _first_comment(path: Path) -> str:
    lines = [ln for ln in path.read_text().splitlines() if ln.startswith("#") and "@package" not in ln][:1]
    return lines[0].lstrip("# ").strip() if lines else ""


def _short(note: str, width: int = 84) -> str:
    return note if len(note) <= width else note[:width].rsplit(" ", 1)[0].rstrip(",;:") + " ..."


def _group_lines(defaults: dict) -> list[str]:
    lines = []
    for g in GROUPS:
        opts = options(g)
        notes = {o: _first_comment(CONF_DIR / g / f"{o}.yaml") for o in opts}
        default = f"(default: {defaults.get(g, {}).get('name', '?')})"
        if len(set(notes.values())) < len(opts) or not any(notes.values()):   # a shared comment tells none apart
            lines.append(f"  {g}=  {' | '.join(opts)}   {default}")
            continue
        lines.append(f"  {g}=  {default}")
        lines += [f"      {o:<12} {_short(notes[o])}".rstrip() for o in opts]
    return lines


def _settings_lines(defaults: dict) -> list[str]:
    lines = []
    for key, value in defaults.items():
        if key in GROUPS:
            continue
        if isinstance(value, dict):
            lines.append(f"  {key}.{{{', '.join(value)}}}")
        else:
            lines.append(f"  {key}={value}")
    return lines


def flow_help(doc: str | None, prog: str) -> str:
    defaults = compose_raw([])
    return "\n".join([
        (doc or prog).strip(), "",
        f"usage: python {prog} [key=value ...] [--cfg job] [--help]", "",
        "Config groups (pick one option per group: group=option; files in conf/<group>/):",
        *_group_lines(defaults), "",
        "Other settings (set any key with key=value, a group's own keys with group.key=value, e.g. "
        "search.beam_width=8):",
        *_settings_lines(defaults), "",
        "Examples:", *[f"  python {prog} {e}" for e in EXAMPLES], "",
        "--cfg job prints the composed configuration with the overrides applied (see every key and its value).",
        "debug=true shows tracebacks. Errors exit 2 (bad configuration or input) or 1 (a failure in the pipeline).",
    ])


def prog_name(flow_file: str | None) -> str:
    return f"flows/{Path(flow_file or 'flow.py').name}"
