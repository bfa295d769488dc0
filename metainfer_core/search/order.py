"""The order in which a state's expansions are scored, so that a budget spent on a large graph's
expensive rewrites still sees the other paths and precisions the target offers."""
from __future__ import annotations

from typing import Callable, Iterator


def keeps(item: tuple) -> bool:
    """Whether an expansion (action, params, site) changes only plan-wide metadata (a directive)."""
    action, params, _ = item
    return action.keeps_graph(action.with_defaults(params))


def in_budget_order(todo) -> list:
    """Plan-wide directives (an execution path, a memory policy) cost no rewrite: scored first,
    then the lossy rewrites, then the rest. Within each group the actions take turns (each
    one's first choice, then each one's second...), the narrower numbers first within a turn
    (Action.width): a few 16-bit variants, each bound and timed on every path, must not use up
    the time an 8-bit one needed."""
    todo, turn, seen = list(todo), [], {}
    for action, _, _ in todo:
        turn.append(seen.get(action.name, 0))
        seen[action.name] = turn[-1] + 1
    keyed = [((not keeps(item), not item[0].lossy, turn[i], item[0].width), i) for i, item in enumerate(todo)]
    return [todo[i] for _, i in sorted(keyed)]


def measured_first_within_turns(todo: list, cheap: Callable[[tuple], bool]) -> Iterator[tuple]:
    """todo in its order of turns (which action, directive or rewrite, goes next), but at each
    turn the action's first choice that measures nothing new, asked then (`cheap`: what was
    measured so far changes as the level goes): a choice re-using a measurement made this level
    comes before one that measures its own (seconds on a large model)."""
    queues: dict[tuple, list] = {}
    for item in todo:
        queues.setdefault((item[0].name, keeps(item)), []).append(item)
    for item in todo:
        queue = queues[(item[0].name, keeps(item))]
        pick = next((i for i, t in enumerate(queue) if cheap(t)), 0)
        yield queue.pop(pick)
