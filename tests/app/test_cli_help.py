"""The flows' command line beyond overrides: --help on every flow, --cfg job, did-you-mean for
misspelt keys and group options, unknown flags. One child process runs every flow's main()
(importing Prefect once), as `python flows/<name>.py ...` would."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLI_FLOWS = sorted(p.stem for p in (ROOT / "flows").glob("*.py") if "def main(" in p.read_text())

CHILD = r"""
import contextlib, io, json, runpy, sys
calls = json.loads(sys.argv[1])
out = []
for flow, argv in calls:
    main = runpy.run_path(f"flows/{flow}.py", run_name="cli_check")["main"]
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        rc = main(argv)
    out.append([rc, o.getvalue(), e.getvalue()])
print("RESULTS" + json.dumps(out))
"""


def _run(calls: list[tuple[str, list[str]]], tmp_path) -> list[tuple[int, str, str]]:
    env = dict(os.environ, PREFECT_HOME=str(tmp_path / "prefect"), PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(calls)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [tuple(r) for r in json.loads(proc.stdout.split("RESULTS", 1)[1])]


def test_help_cfg_and_suggestions(tmp_path):
    art = f"paths.artifacts={tmp_path}"
    calls = [(f, ["--help"]) for f in CLI_FLOWS] + [
        ("adapt", ["--cfg", "job", "target=npu", "search.beam_width=3", art]),
        ("adapt", ["targt=cpu", art]),
        ("adapt", ["search.beam_widht=3", art]),
        ("adapt", ["target=cpux", art]),
        ("adapt", ["--verbose", art]),
        ("adapt", ["--cfg", "hydra", art]),
    ]
    results = _run(calls, tmp_path)
    helps, (cfg, key, nested, option, flag, cfg_kind) = results[:len(CLI_FLOWS)], results[len(CLI_FLOWS):]
    assert {"adapt", "onboard", "reprofile", "train", "adapt_many"} <= set(CLI_FLOWS)
    for flow, (rc, out, err) in zip(CLI_FLOWS, helps):
        assert rc == 0, (flow, err)
        assert f"python flows/{flow}.py" in out                   # its own usage and examples
        assert "target=  (default: cpu)" in out and "npu" in out and "model=" in out   # groups and their options
        assert "search.beam_width=8" in out and "--cfg job" in out                      # how to override
    rc, out, err = cfg
    assert rc == 0 and "name: npu" in out and "beam_width: 3" in out and not (tmp_path / "runs").exists()
    for (rc, out, err), fragment in [(key, "Did you mean 'target'?"), (nested, "Did you mean 'search.beam_width'?"),
                                     (option, "Did you mean 'cpu'? Available: asic, cpu, fpga, gpu, npu"),
                                     (flag, "Unknown flag '--verbose'"), (cfg_kind, "--cfg takes 'job'")]:
        assert rc == 2, err
        assert fragment in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
