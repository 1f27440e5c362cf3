"""Run leases in the store, against the real Redis: the rules lost-run recovery rests on."""

from __future__ import annotations

import time
import uuid

import pytest

from core.errors import RunInProgress
from core.matrix import Matrix
from core.results.report import ExperimentInfo, ExperimentStatus
from core.results.run import RunResult, RunSpec, RunStatus
from core.store import Store

pytestmark = pytest.mark.integration  # the real Redis

MATRIX = Matrix.model_validate(
    {
        "name": "lease",
        "agent": {"command": "true"},
        "tiers": [{"id": "T0"}],
        "scenarios": [{"id": "s", "prompt": "go"}],
    }
)


def _experiment(store: Store, runs: int = 3) -> list[RunSpec]:
    exp_id = f"lease-{uuid.uuid4().hex[:8]}"
    specs = [
        RunSpec(experiment_id=exp_id, run_id=f"{exp_id}:T0:s:{i}", tier="T0", scenario="s",
                run_index=i)
        for i in range(runs)
    ]  # fmt: skip
    info = ExperimentInfo(
        id=exp_id, name="lease", status=ExperimentStatus.running, total_runs=runs,
        created_at=time.time(),
    )  # fmt: skip
    store.experiments.create(info, MATRIX, specs)
    return specs


def _result(spec: RunSpec) -> RunResult:
    return RunResult.of(spec, RunStatus.completed)


def test_an_expired_lease_without_a_result_is_claimed_once(store: Store) -> None:
    lost, alive, finished = _experiment(store)
    exp = lost.experiment_id
    store.leases.take(exp, lost.run_id, "dead-worker", 1)
    store.leases.take(exp, alive.run_id, "live-worker", 60)
    store.leases.take(exp, finished.run_id, "finished-worker", 1)
    store.results.save(_result(finished))  # no holder: the lease stays, expires, is dropped
    assert store.leases.live(exp) >= {lost.run_id, alive.run_id}
    time.sleep(1.2)

    assert store.leases.live(exp) == {alive.run_id}
    assert store.results.claim_lost(exp) == [lost]
    assert store.results.claim_lost(exp) == []  # a second sweeper gets nothing
    # The finished run's lease is gone; the lost run is marked as sent again.
    leases = store.leases.state(exp)
    assert (leases.live, leases.lapsed) == ({alive.run_id}, {lost.run_id})
    assert store.redis.hget(store.keys.leases(exp), lost.run_id) == "0 resent"
    # Resume leaves the live run alone; the lost one was claimed for re-sending.
    assert {s.run_id for s in store.results.pending(exp)} == {lost.run_id}


def test_the_newest_delivery_owns_the_run_and_an_older_one_cannot_save(store: Store) -> None:
    spec, *_ = _experiment(store)
    exp = spec.experiment_id
    store.leases.take(exp, spec.run_id, "first", 60)
    store.leases.take(exp, spec.run_id, "second", 60)  # a redelivery takes over

    assert not store.leases.renew(exp, spec.run_id, "first", 60)
    assert not store.results.save(_result(spec), holder="first")
    assert (
        store.results.get(exp, spec.run_id) is None
        and store.experiments.info(exp).completed_runs == 0
    )

    assert store.leases.renew(exp, spec.run_id, "second", 60)
    assert store.results.save(_result(spec), holder="second")
    assert store.experiments.info(exp).completed_runs == 1
    assert store.leases.live(exp) == set()  # the save ended the lease
    # The same save again (its reply lost) is its own and counts once; another result
    # for the run is refused.
    assert store.results.save(_result(spec), holder="second")
    late = _result(spec).model_copy(update={"duration_seconds": 5.0})
    assert not store.results.save(late, holder="second")
    assert store.experiments.info(exp).completed_runs == 1


def test_a_lease_swept_while_its_holder_was_away_still_lets_it_save(store: Store) -> None:
    spec, *_ = _experiment(store)
    exp = spec.experiment_id
    store.leases.take(exp, spec.run_id, "slow", 1)
    time.sleep(1.2)
    assert store.results.claim_lost(exp) == [spec]
    # The re-sent delivery has not started: the slow holder's result is valid.
    assert store.results.save(_result(spec), holder="slow")
    assert store.experiments.info(exp).completed_runs == 1


def test_giving_a_lease_back_and_marking_a_run_lost(store: Store) -> None:
    spec, other, _ = _experiment(store)
    exp = spec.experiment_id
    store.leases.take(exp, spec.run_id, "leaving", 60)
    store.leases.release(exp, spec.run_id, "someone-else")
    assert store.leases.live(exp) == {spec.run_id}
    store.leases.release(exp, spec.run_id, "leaving")
    assert store.leases.live(exp) == set()
    assert store.results.claim_lost(exp) == []  # given back: queued, not lost

    store.leases.mark_lost(exp, other.run_id)
    assert store.results.claim_lost(exp) == [other]


def test_active_experiments_are_those_not_aggregated(store: Store) -> None:
    running, *_ = _experiment(store)
    done, *_ = _experiment(store)
    store.experiments.set_status(
        done.experiment_id, ExperimentStatus.complete, finished_at=time.time()
    )
    active = store.experiments.active()
    assert running.experiment_id in active and done.experiment_id not in active
    store.experiments.reopen(done.experiment_id)
    assert done.experiment_id in store.experiments.active()


@pytest.mark.parametrize("seconds", [0.5, 5.0])
def test_a_lease_records_its_holder_and_expiry(store: Store, seconds: float) -> None:
    spec, *_ = _experiment(store)
    store.leases.take(spec.experiment_id, spec.run_id, "h", seconds)
    raw = store.redis.hget(store.keys.leases(spec.experiment_id), spec.run_id)
    assert raw is not None
    expiry, holder = raw.split(" ")
    seconds_now, micros = store.redis.time()
    server_now = seconds_now + micros / 1e6
    assert holder == "h"
    assert float(expiry) == pytest.approx(server_now + seconds, abs=0.5)


def test_a_delivery_begins_by_counting_itself_and_taking_the_lease(store: Store) -> None:
    spec, other, third = _experiment(store)
    exp = spec.experiment_id
    first = store.attempts.begin(spec, "d1", 60)
    assert (first.stored, first.attempts, first.status) == (None, 1, ExperimentStatus.running)
    assert store.leases.live(exp) == {spec.run_id}
    store.experiments.set_status(exp, ExperimentStatus.cancelled)
    with pytest.raises(RunInProgress):  # a copy while d1's lease lives: nothing counted
        store.attempts.begin(spec, "d2", 60)
    # The delivery after d1's provider outage takes d1's lease over.
    second = store.attempts.begin(spec, "d2", 60, continues="d1")
    assert (second.attempts, second.status) == (2, ExperimentStatus.cancelled)
    assert not store.results.save(_result(spec), holder="d1")

    assert store.results.save(_result(spec), holder="d2")
    late = store.attempts.begin(spec, "d3", 60)
    assert late.stored == _result(spec)  # nothing counted, no lease taken
    assert store.redis.hget(store.keys.attempts(exp), spec.run_id) == "2"
    assert store.leases.live(exp) == set()
    assert store.attempts.begin(other, "d4", 60).attempts == 1
    # A lapsed lease (its holder died) is the next delivery's.
    assert store.attempts.begin(third, "d5", 0.2).attempts == 1
    time.sleep(0.3)
    assert store.attempts.begin(third, "d6", 60).attempts == 2


def test_runs_found_nowhere_for_long_enough_are_claimed_once(store: Store) -> None:
    a, b, c = _experiment(store)
    exp = a.experiment_id
    assert store.results.claim_unaccounted(exp, {a.run_id, b.run_id}, 2) == []  # first seen
    time.sleep(1.2)
    assert store.results.claim_unaccounted(exp, {a.run_id, b.run_id, c.run_id}, 2) == []
    time.sleep(1.0)
    # b turned up (queued, leased or done): no longer tracked. a is overdue, c not yet.
    assert store.results.claim_unaccounted(exp, {a.run_id, c.run_id}, 2) == [a]
    assert store.results.claim_unaccounted(exp, {a.run_id, c.run_id}, 2) == []  # claimed once
    time.sleep(1.2)
    assert store.results.claim_unaccounted(exp, {b.run_id, c.run_id}, 2) == [c]
    # a is no longer reported (sent again) and b is tracked anew.
    assert store.redis.hkeys(store.keys.unaccounted(exp)) == [b.run_id]
    assert store.results.unfinished(exp) == {a.run_id, b.run_id, c.run_id}


def test_held_leases_are_renewed_while_held_and_never_after(store: Store) -> None:
    """worker.heartbeat: one heartbeat thread a process renews every held lease (two at
    once here, as threads); once a block ends its lease is left alone, so the longer
    lease a retry's wait takes is not cut short by a late renewal."""
    import threading

    from worker.heartbeat import Lease

    spec, other, _ = _experiment(store)
    exp = spec.experiment_id
    leases = [Lease(store, s, 0.6) for s in (spec, other)]
    for lease in leases:
        store.leases.take(exp, lease.spec.run_id, lease.holder, lease.seconds)

    def expiry(run_id: str) -> float:
        raw = store.redis.hget(store.keys.leases(exp), run_id)
        assert raw is not None
        return float(raw.split(" ")[0])

    def hold(lease: Lease, seconds: float) -> None:
        with lease.held():
            time.sleep(seconds)

    threads = [threading.Thread(target=hold, args=(lease, 1.5)) for lease in leases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # 1.5 s held with 0.6 s leases: alive only if renewed along the way.
    assert store.leases.live(exp) == {spec.run_id, other.run_id}
    leases[0].hold_through(30)  # a retry's wait, just after the block
    kept = expiry(spec.run_id)
    time.sleep(0.5)  # more than a renewal's interval (0.2 s)
    assert expiry(spec.run_id) == kept
    assert expiry(other.run_id) < time.time() + 0.2  # lapsing: nobody renews it now
