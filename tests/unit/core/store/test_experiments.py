"""core.store.experiments: the record's live counts and status, the status channel,
cancelling in one step with reading, a resume's hold, and why an experiment is missing."""

from __future__ import annotations

import time

import pytest

from core.errors import ExperimentLost, ExperimentNotFound, ResumeInProgress
from core.results.report import ExperimentStatus
from core.results.run import RunStatus
from core.store import Store
from tests.support.records import matrix_of, record_experiment, result_of


def test_info_counts_the_stored_results_live(store: Store) -> None:
    info, specs = record_experiment(store)
    store.results.save(result_of(specs[0], passed=True))
    store.results.save(result_of(specs[1], RunStatus.infra_error))
    store.results.save(result_of(specs[2], RunStatus.cancelled))
    live = store.experiments.info(info.id)
    assert (live.completed_runs, live.passes, live.errors, live.cancelled) == (3, 1, 1, 1)
    assert live.total_runs == 4 and live.status is ExperimentStatus.running


def test_the_matrix_comes_back_as_submitted(store: Store) -> None:
    info, _ = record_experiment(store, budget={"agent_usd": 2.5})
    assert store.experiments.matrix(info.id) == matrix_of(budget={"agent_usd": 2.5})


def test_a_status_change_is_announced_on_its_channel(store: Store) -> None:
    info, _ = record_experiment(store)
    changes = store.experiments.status_changes(info.id)
    try:
        store.experiments.set_status(info.id, ExperimentStatus.complete, finished_at=12.5)
        # The subscription's own confirmation comes first, read as None.
        deadline = time.monotonic() + 5
        message = None
        while message is None and time.monotonic() < deadline:
            message = changes.get_message(timeout=1)
    finally:
        changes.close()
    assert message is not None and message["data"] == "complete"
    assert store.experiments.info(info.id).finished_at == 12.5


def test_cancel_changes_only_an_unfinished_experiment_and_says_what_it_was(store: Store) -> None:
    running, _ = record_experiment(store)
    assert store.experiments.cancel(running.id) is ExperimentStatus.running
    assert store.experiments.info(running.id).status is ExperimentStatus.cancelled
    done, _ = record_experiment(store)
    store.experiments.set_status(done.id, ExperimentStatus.complete)
    assert store.experiments.cancel(done.id) is ExperimentStatus.complete
    assert store.experiments.info(done.id).status is ExperimentStatus.complete
    with pytest.raises(ExperimentNotFound):
        store.experiments.cancel("never-here")


def test_one_resume_at_a_time_and_the_hold_goes_with_it(store: Store) -> None:
    info, _ = record_experiment(store)
    with (
        store.experiments.resuming(info.id),
        pytest.raises(ResumeInProgress),
        store.experiments.resuming(info.id),
    ):
        pass
    with store.experiments.resuming(info.id):  # released: a resume may start again
        pass
    assert not store.redis.exists(store.keys.resuming(info.id))


def test_an_experiment_with_keys_but_no_record_is_lost_not_unknown(store: Store) -> None:
    info, _ = record_experiment(store)
    store.redis.delete(store.keys.experiment(info.id))
    assert isinstance(store.experiments.why_missing(info.id), ExperimentLost)
    assert not store.experiments.exists(info.id)
    with pytest.raises(ExperimentLost):
        store.experiments.info(info.id)
    assert type(store.experiments.why_missing("never-here")) is ExperimentNotFound


def test_active_leaves_out_finished_and_interrupted_experiments(store: Store) -> None:
    first, _ = record_experiment(store, created_at=1.0)
    finished, _ = record_experiment(store, created_at=2.0)
    paused, _ = record_experiment(store, created_at=3.0)
    store.experiments.set_status(finished.id, ExperimentStatus.complete, finished_at=9.0)
    store.experiments.interrupt(paused.id)
    assert store.experiments.active() == [first.id]
    assert store.experiments.latest() == paused.id
    assert [i.id for i in store.experiments.all()] == [first.id, finished.id, paused.id]
    store.experiments.reopen(finished.id)
    assert store.experiments.active() == [first.id, finished.id]


def test_chords_and_the_sent_queue_are_kept_on_the_record(store: Store) -> None:
    info, _ = record_experiment(store)
    assert store.experiments.sent_to(info.id) is None
    store.experiments.note_chord(info.id, "g1")
    store.experiments.note_chord(info.id, "g2")
    store.experiments.mark_sent(info.id, "runs")
    assert store.redis.hget(store.keys.experiment(info.id), "chords") == "g1 g2"
    assert store.experiments.sent_to(info.id) == "runs"
