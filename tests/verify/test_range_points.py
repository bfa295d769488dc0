"""Verify across the shape range: every plan also runs at the range's other points on the target,
its accuracy loss there is judged against the original; a plan that fixed a dim the range varies
fails there, and the reason names the point."""
from __future__ import annotations


from metainfer_core.backends import backend_for
from metainfer_core.decide.stage import decide_stage
from metainfer_core.ir.constant_folding import run as fold
from metainfer_core.ir.tensors import tuned_shapes
from metainfer_core.normalize.shapes import bind_input_shapes
from metainfer_core.prepare.stage import prepare_stage
from metainfer_core.search.beam import SearchResult
from metainfer_core.search.candidate import Candidate
from metainfer_core.search.stage import SearchOutcome
from metainfer_core.verify.stage import verify_stage

from graphs import tagger


def test_a_plan_that_fixed_the_varying_dim_is_rejected_at_the_point_it_fails(settings_for, tmp_path):
    path = tagger(tmp_path / "tagger.onnx")     # ids, mask [batch, seq]: positions computed from seq inside
    s = settings_for("model=file", f"model.path={path}", "model.shape_range={ids:[1,[8,32]],mask:[1,[8,32]]}",
                     "model.input_shapes={ids:[1,16],mask:[1,16]}")
    prepared = prepare_stage(s, False, progress=lambda _m: None)
    backend = backend_for(s)
    # the plan a shape-blind rewrite would make: the graph bound at the tuned shape, its shape arithmetic folded
    frozen, _ = fold(bind_input_shapes(prepared.model, tuned_shapes(prepared.model)))
    default = Candidate(prepared.model)
    outcome = SearchOutcome(SearchResult(default, [Candidate(prepared.model), Candidate(frozen)]), default=default)
    said: list[str] = []
    verified = verify_stage(s, prepared, backend, outcome, progress=said.append)
    general, fixed = verified.candidates
    assert general.ok and set(general.point_losses) == {"min", "max"}
    assert max(general.point_losses.values()) < 1e-5          # the default itself: the same outputs everywhere
    assert not fixed.ok and fixed.error.startswith("does not run at min (ids [1, 8], mask [1, 8])")
    assert any("also ran at min ids [1, 8], mask [1, 8], max ids [1, 32], mask [1, 32]" in m for m in said), said
    decision, _ = decide_stage(s, backend, outcome, verified)
    assert "does not run at min" in decision.verdicts[fixed.label]
