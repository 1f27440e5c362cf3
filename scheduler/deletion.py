"""Deleting experiments with everything stored with them: one by id, or those older
than an age. Running ones are refused unless forced: their queued runs are dropped
by the workers, and a run in progress may write its result back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from core.errors import ExperimentNotFound, InputError
from core.results.report import ExperimentStatus
from core.store import Store
from core.store.retention import (
    Deleted,
    created_before,
    delete_experiment,
    experiment_keys,
    stored_bytes,
)
from scheduler.connection import Connection


@dataclass(frozen=True)
class Doomed:
    """An experiment that may be deleted, and what that frees."""

    experiment_id: str
    keys: int
    stored_bytes: int


def deletable(conn: Connection, experiment: str, *, force: bool = False) -> Doomed:
    """What deleting `experiment` would remove; ExperimentNotFound when it has no key,
    InputError while it runs (unless `force`)."""
    store = conn.store
    keys = experiment_keys(store, experiment)
    if not keys:
        raise ExperimentNotFound(experiment)
    _refuse_running(store, experiment, force)
    return Doomed(experiment, len(keys), stored_bytes(store).get(experiment, 0))


def delete(conn: Connection, experiment: str, *, force: bool = False) -> Deleted:
    """Delete an experiment and everything stored with it: runs, evidence (its files in
    an artifacts folder too), reports, files, counters, and its chords' Celery keys."""
    _refuse_running(conn.store, experiment, force)
    return delete_experiment(conn.store, experiment)


@dataclass(frozen=True)
class Expired:
    doomed: dict[str, int] = field(default_factory=dict)  # id -> stored bytes, oldest first
    kept: dict[str, str] = field(default_factory=dict)  # running ones, with how far they are


def expired(conn: Connection, older_than_s: float, *, force: bool = False) -> Expired:
    """The experiments created longer ago than `older_than_s`: those to delete, and the
    running ones kept (unless `force`)."""
    store = conn.store
    sizes = stored_bytes(store)
    found = Expired()
    for exp_id in created_before(store, time.time() - older_than_s):
        running = _running(store, exp_id)
        if running and not force:
            found.kept[exp_id] = running
        else:
            found.doomed[exp_id] = sizes.get(exp_id, 0)
    return found


def _refuse_running(store: Store, experiment: str, force: bool) -> None:
    running = _running(store, experiment)
    if running and not force:
        raise InputError(
            f"experiment {experiment} is {running}: cancel it first (`scheduler cancel "
            f"{experiment}`), or pass --force to delete it while it runs"
        )


def _running(store: Store, exp_id: str) -> str | None:
    """How far the experiment is when it is still pending or running, else None."""
    try:
        info = store.experiments.info(exp_id)
    except KeyError:  # ExperimentNotFound: keys left without a record, nothing runs
        return None
    if info.status not in (ExperimentStatus.pending, ExperimentStatus.running):
        return None
    return f"{info.status.value} ({info.completed_runs}/{info.total_runs} runs done)"
