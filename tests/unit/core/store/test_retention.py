"""core.store.retention: an experiment removed whole (its chords' Celery keys and its
evidence files with it), what each takes, which are older than a date."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from core.errors import ExperimentNotFound
from core.evidence.models import RunEvidence
from core.results.report import ExperimentStatus
from core.store import Store
from core.store.retention import created_before, delete_experiment, experiment_keys, stored_bytes
from fleet.finish import finish_experiment
from tests.support.records import record_experiment, result_of


def test_an_experiment_goes_whole_and_its_neighbour_stays(store: Store, tmp_path: Path) -> None:
    gone, specs = record_experiment(store)
    kept, kept_specs = record_experiment(store)
    store.results.save(result_of(specs[0]))
    store.results.save(result_of(kept_specs[0]))
    saved = store.evidence.save(
        RunEvidence(experiment_id=gone.id, run_id=specs[0].run_id), folder=tmp_path
    )
    store.experiments.note_chord(gone.id, "g1")
    chord = store.keys.chord("g1")
    store.redis.set(chord[0], "meta")
    assert set(experiment_keys(store, gone.id)) >= {chord[0], store.keys.runs(gone.id)}
    deleted = delete_experiment(store, gone.id)
    assert deleted.files == 1 and deleted.unreachable == [] and deleted.keys >= 4
    assert saved.path is not None and not saved.path.parent.exists()
    assert experiment_keys(store, gone.id) == []
    assert not store.redis.exists(chord[0])
    assert [i.id for i in store.experiments.all()] == [kept.id]
    assert store.results.all(kept.id) == [result_of(kept_specs[0])]


def test_a_run_that_starts_while_its_experiment_is_deleted_leaves_no_key(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`delete --force` of a running experiment: a worker's next run begins just before
    the keys go. Its delivery makes a key the experiment had none of (its lease), which
    must not outlive the delete: the record goes first, so the run finds it gone."""
    exp, specs = record_experiment(store)
    store.results.save(result_of(specs[0]))
    assert not store.redis.exists(store.keys.leases(exp.id))
    unlink = store.redis.unlink
    began: list[str] = []

    def a_run_begins_first(*keys: Any) -> Any:
        with contextlib.suppress(ExperimentNotFound):
            store.attempts.begin(specs[1], "worker-1", 60.0)
            began.append(specs[1].run_id)
        return unlink(*keys)

    monkeypatch.setattr(store.redis, "unlink", a_run_begins_first)
    delete_experiment(store, exp.id)
    monkeypatch.undo()
    assert began == []
    assert experiment_keys(store, exp.id) == []


def test_a_finish_that_writes_after_the_delete_writes_nothing_back(store: Store) -> None:
    """The aggregation reads the runs, then writes the report and the status: deleted in
    between, neither write comes back as a key (a report, a record of a status only)."""
    exp, specs = record_experiment(store)
    for spec in specs:
        store.results.save(result_of(spec))
    finish_experiment(store, exp.id)
    report = store.reports.get(exp.id)
    assert report is not None
    delete_experiment(store, exp.id)
    with pytest.raises(ExperimentNotFound):
        store.reports.save(report)
    with pytest.raises(ExperimentNotFound):
        store.experiments.set_status(exp.id, ExperimentStatus.complete, finished_at=1.0)
    assert experiment_keys(store, exp.id) == []


def test_sizes_and_ages_per_experiment(store: Store) -> None:
    old, _ = record_experiment(store, created_at=100.0)
    new, _ = record_experiment(store, created_at=200.0)
    sizes = stored_bytes(store)
    assert set(sizes) == {old.id, new.id} and all(size > 0 for size in sizes.values())
    assert list(created_before(store, 200.0)) == [old.id]
