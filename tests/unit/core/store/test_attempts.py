"""core.store.attempts: a delivery is counted and recorded as it starts, in one step
with taking the run's lease; a copy of a run in progress does not start."""

from __future__ import annotations

import json

import pytest

from core.errors import ExperimentNotFound, ExperimentPaused, RunInProgress
from core.results.report import ExperimentStatus
from core.results.run import RunStatus
from core.store import Store
from core.store.attempts import NO_RESULT
from core.store.health import HealthNote
from tests.support.records import record_experiment, result_of


def test_deliveries_are_counted_recorded_and_ended(store: Store) -> None:
    info, specs = record_experiment(store)
    spec = specs[0]
    first = store.attempts.begin(spec, "d1", 0.05, worker="w1")
    assert (first.attempts, first.status, first.halted) == (1, ExperimentStatus.running, None)
    store.attempts.end(info.id, spec.run_id, 1, "outage: retried")
    second = store.attempts.begin(spec, "d2", 60, worker="w2", continues="d1")
    assert second.attempts == 2
    assert [(d.worker, d.outcome) for d in second.deliveries] == [
        ("w1", "outage: retried"),
        ("w2", NO_RESULT),
    ]
    delivered = json.loads(store.redis.hget(store.keys.deliveries(info.id), spec.run_id) or "")
    assert delivered[1]["worker"] == "w2" and "ended_at" not in delivered[1]


def test_a_copy_of_a_run_in_progress_does_not_start(store: Store) -> None:
    _, specs = record_experiment(store)
    store.attempts.begin(specs[0], "d1", 60)
    with pytest.raises(RunInProgress):
        store.attempts.begin(specs[0], "d2", 60)
    assert store.redis.hget(store.keys.attempts(specs[0].experiment_id), specs[0].run_id) == "1"


def test_a_stored_result_is_returned_instead_of_a_delivery(store: Store) -> None:
    _, specs = record_experiment(store)
    store.results.save(result_of(specs[0], passed=True))
    delivery = store.attempts.begin(specs[0], "late", 60)
    assert delivery.stored == result_of(specs[0], passed=True) and delivery.attempts == 0


def test_a_paused_or_deleted_experiment_starts_nothing(store: Store) -> None:
    info, specs = record_experiment(store)
    store.experiments.interrupt(info.id)
    with pytest.raises(ExperimentPaused):
        store.attempts.begin(specs[0], "d1", 60)
    store.redis.delete(store.keys.experiment(info.id))
    with pytest.raises(ExperimentNotFound):
        store.attempts.begin(specs[0], "d1", 60)


def test_a_tier_stopped_by_fail_fast_is_said_to_its_next_delivery(store: Store) -> None:
    _, specs = record_experiment(store)
    failed = result_of(specs[1], RunStatus.infra_error, fail_reason="no such image")
    assert store.results.finish(failed, health=HealthNote("T0", "no such image", 1)).stopped
    assert store.attempts.begin(specs[0], "d1", 60).halted == "no such image"
    assert store.attempts.begin(specs[2], "d2", 60).halted is None  # T1


def test_a_begin_tried_again_after_its_reply_was_lost_counts_once(store: Store) -> None:
    """Redis went away after it ran a delivery's begin but before the reply reached the
    worker, which tries again (worker.run, `patiently`): the lease it finds is its own,
    not another delivery's, and the delivery is counted and recorded once."""
    _, specs = record_experiment(store)
    first = store.attempts.begin(specs[0], "d1", 60, worker="w")
    again = store.attempts.begin(specs[0], "d1", 60, worker="w")
    assert first.attempts == again.attempts == 1
    assert len(again.deliveries) == 1 and again.deliveries == first.deliveries
    with pytest.raises(RunInProgress):  # another delivery still finds it held
        store.attempts.begin(specs[0], "d2", 60)
