"""core.store.specs: the planned runs, stored without what their key says, read back
whole and in order."""

from __future__ import annotations

from core.store import Store
from tests.support.records import record_experiment


def test_specs_come_back_whole_in_run_order_without_their_ids_stored(store: Store) -> None:
    info, specs = record_experiment(store)
    assert store.specs.all(info.id) == specs
    raw = store.redis.hget(store.keys.specs(info.id), specs[0].run_id)
    assert raw is not None and info.id not in raw
    assert store.specs.count(info.id) == 4 and store.specs.has(info.id, specs[3].run_id)


def test_of_keeps_the_asked_order_and_skips_unplanned_runs(store: Store) -> None:
    info, specs = record_experiment(store)
    asked = [specs[2].run_id, "not-planned", specs[0].run_id]
    assert store.specs.of(info.id, asked) == [specs[2], specs[0]]
    assert store.specs.of(info.id, []) == []


def test_ids_ending_matches_glob_characters_literally(store: Store) -> None:
    info, _ = record_experiment(store)
    assert store.specs.ids_ending(":T1:s1:0") == [f"{info.id}:T1:s1:0"]
    assert store.specs.ids_ending("*") == []
