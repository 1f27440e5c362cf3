"""core.store.results: a result is stored once and counted once, only by its lease's
holder, never for a deleted experiment; what is pending, unfinished, lost."""

from __future__ import annotations

import time

import pytest

from core.errors import ExperimentNotFound
from core.results.run import RunStatus
from core.store import Store
from tests.support.records import record_experiment, result_of


def test_a_result_is_stored_and_counted_once(store: Store) -> None:
    info, specs = record_experiment(store)
    first = result_of(specs[0], passed=True, cost_usd=0.5)
    assert store.results.save(first)
    assert not store.results.save(result_of(specs[0], RunStatus.timeout))
    assert store.results.get(info.id, specs[0].run_id) == first
    live = store.experiments.info(info.id)
    assert (live.completed_runs, live.passes) == (1, 1)


def test_only_the_leases_holder_stores_the_result(store: Store) -> None:
    info, specs = record_experiment(store)
    store.leases.take(info.id, specs[0].run_id, "newer", 60)
    assert not store.results.save(result_of(specs[0]), holder="older")
    assert store.results.save(result_of(specs[0]), holder="newer")
    assert store.leases.live(info.id) == set()  # the save ended the lease


def test_no_result_comes_back_for_a_deleted_experiment(store: Store) -> None:
    _, specs = record_experiment(store)
    store.redis.delete(store.keys.experiment(specs[0].experiment_id))
    with pytest.raises(ExperimentNotFound):
        store.results.save(result_of(specs[0]))
    assert not store.redis.exists(store.keys.runs(specs[0].experiment_id))


def test_results_come_in_run_order(store: Store) -> None:
    info, specs = record_experiment(store)
    for spec in reversed(specs):
        store.results.save(result_of(spec))
    assert [r.run_id for r in store.results.all(info.id)] == [s.run_id for s in specs]


def test_pending_runs_have_neither_a_result_nor_a_live_lease(store: Store) -> None:
    info, specs = record_experiment(store)
    store.results.save(result_of(specs[0]))
    store.leases.take(info.id, specs[1].run_id, "d", 60)
    assert store.results.pending(info.id) == specs[2:]
    assert store.results.unfinished(info.id) == {s.run_id for s in specs[1:]}


def test_unrecord_makes_never_started_runs_pending_again(store: Store) -> None:
    info, specs = record_experiment(store)
    store.results.save(result_of(specs[0], RunStatus.not_run))
    store.results.save(result_of(specs[1]))
    assert store.results.unrecord(info.id, RunStatus.not_run) == [specs[0]]
    live = store.experiments.info(info.id)
    assert (live.completed_runs, live.not_run) == (1, 0)
    assert store.results.get(info.id, specs[0].run_id) is None


def test_a_lost_run_is_claimed_once(store: Store) -> None:
    info, specs = record_experiment(store)
    store.leases.take(info.id, specs[0].run_id, "died", 0.01)
    time.sleep(0.05)
    assert store.results.claim_lost(info.id) == [specs[0]]
    assert store.results.claim_lost(info.id) == []


def test_a_run_found_nowhere_is_handed_out_once_it_stayed_so(store: Store) -> None:
    info, specs = record_experiment(store)
    ids = [specs[0].run_id]
    assert store.results.claim_unaccounted(info.id, ids, 0.05) == []  # first seen now
    time.sleep(0.1)
    assert store.results.claim_unaccounted(info.id, ids, 0.05) == [specs[0]]
    assert store.results.claim_unaccounted(info.id, ids, 0.05) == []  # seen anew
