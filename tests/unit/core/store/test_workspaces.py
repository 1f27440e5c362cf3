"""core.store.workspaces: a run's archived workspace, never written for a deleted
experiment."""

from __future__ import annotations

import pytest

from core.errors import ExperimentNotFound
from core.files.archive import ArchivedWorkspace
from core.store import Store
from tests.support.records import record_experiment


def test_an_archive_is_kept_only_while_its_experiment_is(store: Store) -> None:
    info, specs = record_experiment(store)
    archive = ArchivedWorkspace(tar_gz="H4sI", size_bytes=4)
    store.workspaces.save(info.id, specs[0].run_id, archive)
    assert store.workspaces.get(info.id, specs[0].run_id) == archive
    assert store.workspaces.count(info.id) == 1
    store.redis.delete(store.keys.experiment(info.id))
    with pytest.raises(ExperimentNotFound):
        store.workspaces.save(info.id, specs[1].run_id, archive)
    assert store.workspaces.get(info.id, specs[1].run_id) is None
