"""docs/actions.md's table, written from the actions' own declarations (name, lossy, parameters
with their search domains, summary): `python -m metainfer_core.actions docs/actions.md`
rewrites the table between its markers; a test checks the page matches."""
from __future__ import annotations

from metainfer_core.actions.base import Action

BEGIN, END = "<!-- actions:begin -->", "<!-- actions:end -->"


def _domain(action: Action) -> str:
    if not action.params:
        return "–"
    return ", ".join(f"`{n}` " + " / ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in p.domain)
                     for n, p in action.params.items())


def table() -> str:
    from metainfer_core.actions import ACTIONS     # (this module is one of the package's: imported as it registers)

    rows = [f"| `{a.name}` | {'yes' if a.lossy else 'no'} | {_domain(a)} | {a.summary or a.words({})[1]} |"
            for a in sorted(ACTIONS.values(), key=lambda a: (a.lossy, -a.width, a.name))]
    return "\n".join(["| action | lossy | parameters (search domain) | what it rewrites |", "|---|---|---|---|", *rows])


def rewritten(page: str) -> str:
    """`page` with the table between its markers replaced by today's."""
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"

