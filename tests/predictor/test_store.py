"""Predictor revisions on disk: numbered, never overwritten, a current pointer, history and
a stale flag that outlives retraining."""
from __future__ import annotations

from metainfer_core.predictor import PredictorStore


def test_revisions_current_history_and_stale(tmp_path):
    store = PredictorStore(tmp_path / "p")
    assert store.revisions() == [] and store.current() is None and store.stale() is None
    for _ in range(2):
        rev, path = store.new_revision_path()
        (path / "meta.json").write_text("{}")
    assert store.revisions() == [1, 2]
    store.set_current(1)
    assert store.current() == 1
    store.mark_stale("ratio drifted", ratio=1.4)
    store.set_current(2)
    assert store.stale()["ratio"] == 1.4          # retraining on the same records does not clear it
    store.clear_stale()
    assert store.stale() is None
    assert [e["event"] for e in store.history()] == ["marked_stale"]


def test_an_unfinished_revision_is_not_listed(tmp_path):
    store = PredictorStore(tmp_path)
    rev, _ = store.new_revision_path()          # no meta.json yet: a trainer still writing
    assert store.revisions() == [] and store.new_revision_path()[0] == rev + 1
