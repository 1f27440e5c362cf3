"""core.store.health: fail-fast stops a tier once, when its first results are all the
same infrastructure error; a result of the agent's own keeps it going."""

from __future__ import annotations

from core.store import Store
from tests.support.records import record_experiment


def test_a_tier_is_stopped_once_at_the_threshold(store: Store) -> None:
    info, _ = record_experiment(store)
    assert not store.health.note(info.id, "T0", "no such image", 2)
    assert store.health.note(info.id, "T0", "no such image", 2)
    assert not store.health.note(info.id, "T0", "no such image", 2)
    assert store.health.halted(info.id) == {"T0": "no such image"}


def test_a_result_of_its_own_or_a_zero_threshold_keeps_the_tier_going(store: Store) -> None:
    info, _ = record_experiment(store)
    store.health.note(info.id, "T0", None, 1)
    assert not store.health.note(info.id, "T0", "boom", 1)
    assert not store.health.note(info.id, "T1", "boom", 0)
    assert store.health.halted(info.id) == {}


def test_the_first_unrecognised_format_of_a_tier_is_kept(store: Store) -> None:
    info, _ = record_experiment(store)
    store.health.note_unrecognised(info.id, "T0", "claude-stream-json")
    store.health.note_unrecognised(info.id, "T0", "plain")
    assert store.health.unrecognised(info.id) == {"T0": "claude-stream-json"}
