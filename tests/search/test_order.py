"""The order a state's expansions are scored in (search/order.py): plan-wide directives first,
then the lossy rewrites, then the rest; the actions taking turns, the narrower numbers first
within a turn (Action.width); at each turn the action's choice re-using a measurement first."""
from __future__ import annotations

from metainfer_core.actions import ACTIONS
from metainfer_core.search.order import in_budget_order, keeps, measured_first_within_turns


def _names(todo) -> list[tuple[str, dict]]:
    return [(a.name, p) for a, p, _ in todo]


def test_directives_come_first_then_the_lossy_rewrites_then_the_rest():
    tiling, fp16, binding, reuse = ACTIONS["tiling"], ACTIONS["fp16"], ACTIONS["binding"], ACTIONS["memory_reuse"]
    ov = {"runtime": "openvino", "precision": "f32"}
    todo = [(tiling, {"tiles": 2}, None), (fp16, {}, None), (binding, ov, None), (tiling, {"tiles": 4}, None),
            (reuse, {"strategy": "greedy"}, None)]
    assert keeps(todo[2]) and keeps(todo[4]) and not keeps(todo[0]) and not keeps(todo[1])
    assert _names(in_budget_order(todo)) == [("binding", ov), ("memory_reuse", {"strategy": "greedy"}),
                                             ("fp16", {}), ("tiling", {"tiles": 2}), ("tiling", {"tiles": 4})]


def test_within_a_turn_the_narrower_numbers_come_first():
    """Each action's first choice before any one's second; within a turn int8 (8 bits) before the
    16-bit precisions, which keep their order: a few 16-bit variants must not use up the time an
    8-bit one needed."""
    fp16, bf16, int8, dynamic = ACTIONS["fp16"], ACTIONS["bf16"], ACTIONS["int8"], ACTIONS["int8_dynamic"]
    assert int8.width == dynamic.width == 8 and fp16.width == bf16.width == 16
    todo = [(fp16, {"scope": "compute"}, None), (fp16, {"scope": "all"}, None), (bf16, {"scope": "compute"}, None),
            (int8, {"scope": "compute"}, None), (int8, {"scope": "all"}, None), (dynamic, {}, None)]
    assert _names(in_budget_order(todo)) == [
        ("int8", {"scope": "compute"}), ("int8_dynamic", {}), ("fp16", {"scope": "compute"}),
        ("bf16", {"scope": "compute"}),                                     # the first turn
        ("int8", {"scope": "all"}), ("fp16", {"scope": "all"})]            # the second


def test_each_turn_takes_the_actions_choice_that_reuses_a_measurement_first():
    """After whole int8 with uint8 activations measured its sensitivity, int8 keeping layers in
    float with the same activations re-uses it and comes at int8's next turn, before int8 with
    int8 activations (a sensitivity of its own); the actions' turns stay as they were."""
    int8, dynamic = ACTIONS["int8"], ACTIONS["int8_dynamic"]
    whole_u8, whole_s8 = {"activation_type": "QUInt8", "float_layers": 0}, {"activation_type": "QInt8", "float_layers": 0}
    fit_u8 = {"activation_type": "QUInt8", "float_layers": "fit"}
    todo = [(int8, whole_u8, None), (dynamic, {"per_channel": False}, None), (int8, whole_s8, None),
            (dynamic, {"per_channel": True}, None), (int8, fit_u8, None)]
    measured: set[str] = set()

    def cheap(t):
        return t[0] is int8 and t[1]["activation_type"] in measured

    order = []
    for action, params, _ in measured_first_within_turns(todo, cheap):
        order.append((action.name, params))
        if action is int8:
            measured.add(params["activation_type"])
    assert order == [("int8", whole_u8), ("int8_dynamic", {"per_channel": False}), ("int8", fit_u8),
                     ("int8_dynamic", {"per_channel": True}), ("int8", whole_s8)]
