"""core.store.leases: a lease is its holder's to renew and release; lapsed ones are
claimed once and marked sent again."""

from __future__ import annotations

import time

from core.store import Store
from core.store.leases import LOST, RESENT
from tests.support.records import record_experiment, result_of


def test_only_the_holder_renews_or_releases(store: Store) -> None:
    info, specs = record_experiment(store)
    run = specs[0].run_id
    store.leases.take(info.id, run, "a", 60)
    assert not store.leases.renew(info.id, run, "b", 60)
    store.leases.release(info.id, run, "b")
    assert store.leases.live(info.id) == {run}
    assert store.leases.renew(info.id, run, "a", 60)
    store.leases.release(info.id, run, "a")
    assert store.leases.live(info.id) == set()


def test_take_overrides_whoever_held_it(store: Store) -> None:
    info, specs = record_experiment(store)
    run = specs[0].run_id
    store.leases.take(info.id, run, "a", 60)
    store.leases.take(info.id, run, "b", 60)
    assert not store.leases.renew(info.id, run, "a", 60)


def test_expired_leases_are_claimed_once_and_finished_runs_leave_the_table(store: Store) -> None:
    info, specs = record_experiment(store)
    lost, finished = specs[0].run_id, specs[1].run_id
    store.leases.take(info.id, lost, "a", 0.01)
    store.leases.take(info.id, finished, "b", 0.01)
    store.results.save(result_of(specs[1]))  # holder '': whoever holds it
    store.leases.take(info.id, finished, "b", 0.01)  # a late renewal of a finished run
    time.sleep(0.05)
    assert store.leases.claim_expired(info.id) == [lost]
    assert store.leases.claim_expired(info.id) == []
    leases = store.redis.hgetall(store.keys.leases(info.id))
    assert leases == {lost: f"0 {RESENT}"}
    assert store.leases.state(info.id).lapsed == {lost}
    store.leases.mark_lost(info.id, lost)
    assert store.leases.claim_expired(info.id) == [lost]  # a failed re-send comes back
    assert store.redis.hget(store.keys.leases(info.id), lost) == f"0 {RESENT}"
    assert LOST != RESENT
