"""Actions declare themselves: they register by existing in the package, and docs/actions.md's
table is the one their declarations write."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from metainfer_core.actions import ACTIONS
from metainfer_core.actions.catalogue import rewritten, table

ROOT = Path(__file__).resolve().parents[2]


def test_the_actions_page_shows_what_the_actions_declare():
    page = (ROOT / "docs" / "actions.md").read_text()
    assert rewritten(page) == page, "docs/actions.md is stale: run `python -m metainfer_core.actions docs/actions.md`"
    for name, action in ACTIONS.items():
        assert f"| `{name}` |" in table() and action.summary, name


def test_every_action_declares_what_the_search_and_the_report_read():
    for name, action in ACTIONS.items():
        short, long = action.words(action.with_defaults({}))
        assert short and long and not long.startswith(name), name
        assert action.width in (8, 16, 32) and action.kind_label(action.with_defaults({})), name
    assert [n for n, a in ACTIONS.items() if a.binds_path] == ["binding"]


def test_a_new_action_module_registers_itself(tmp_path, monkeypatch):
    """One file in the package is the whole of adding an action (here a copy of the package with
    one more module, imported fresh, so the real registry is untouched)."""
    import shutil

    pkg = tmp_path / "metainfer_core"
    shutil.copytree(ROOT / "metainfer_core", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "actions" / "identity.py").write_text(textwrap.dedent('''
        """A lossless no-op, to show that an action registers by existing."""
        from metainfer_core.actions.base import Action
        from metainfer_core.ir.graph_utils import clone


        class Identity(Action):
            name = "identity"
            summary = "nothing: the graph as it was"

            def sites(self, model, params, target):
                return []

            def legal(self, model, site, params, target):
                return None

            def apply(self, model, site, params, ctx):
                return clone(model)
    '''))
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import metainfer_core.actions as a; "
            "assert a.__file__.startswith(sys.argv[1]), a.__file__; print(sorted(a.ACTIONS))")
    import subprocess

    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
    assert "'identity'" in out.stdout and "'int8'" in out.stdout, out


def test_two_actions_of_one_name_are_refused():
    from metainfer_core.actions import _discovered
    from metainfer_core.actions.base import Action

    class Clash(Action):        # defined here, outside the package: not registered
        name = "int8"

        def sites(self, model, params, target):
            return []

        def legal(self, model, site, params, target):
            return None

        def apply(self, model, site, params, ctx):
            return model

    Clash.__module__ = "metainfer_core.actions.clash"
    with pytest.raises(TypeError, match="two actions are named 'int8'"):
        _discovered()
