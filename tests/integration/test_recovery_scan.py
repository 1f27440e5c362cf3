"""The sweep's search for vanished runs, against the real Redis: it reads the queues
only when runs are missing from everywhere cheaper to look, and a sweeper reads them
again only once SCAN_SPACING times its last read has passed (fleet.recovery)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from core.matrix import load_matrix
from core.store import Store
from fleet import recovery
from scheduler.dispatch import send
from scheduler.plan import experiment_info, plan
from tests.conftest import QUEUE
from worker.celery_app import create_app

pytestmark = pytest.mark.integration  # the real Redis


def test_a_vanished_run_is_found_by_reading_the_queues_at_most_so_often(
    redis_url: str, store: Store, tmp_path: Path
) -> None:
    # A queue of its own: a message an earlier test of the session left in the
    # session's queue would be the one this test takes out.
    queue = f"{QUEUE}-scan"  # the conftest removes it
    app = create_app(redis_url, default_queue=queue)
    path = tmp_path / "matrix.yaml"
    path.write_text(
        "name: scan\nruns_per_tier: 400\nagent: {command: 'true', timeout_s: 30}\n"
        "tiers: [{id: T0}]\nscenarios: [{id: s, prompt: go}]\n"
    )
    matrix = load_matrix(path)
    exp_id = f"scan-{uuid.uuid4().hex[:8]}"
    store.experiments.create(experiment_info(matrix, exp_id, matrix.total_runs()), matrix)
    specs = list(plan(matrix, exp_id))
    send(app, store, matrix, exp_id, specs, len(specs), record=True)
    try:
        info = store.experiments.info(exp_id)
        # Every run is queued: nothing is missing, the queues are not read.
        assert recovery._unaccounted(app, store, info, {queue}) == set()
        assert exp_id not in recovery._next_scan
        store.redis.rpop(queue)  # the oldest message lost, as kombu loses one mid-fetch
        vanished = {specs[0].run_id}

        assert recovery._unaccounted(app, store, info, {queue}) == vanished
        due = recovery._next_scan[exp_id]
        assert due > time.monotonic()
        assert recovery._unaccounted(app, store, info, {queue}) is None  # read just now
        while time.monotonic() < due:
            time.sleep(0.01)
        assert recovery._unaccounted(app, store, info, {queue}) == vanished

        # A sweep that did not read the queues keeps what the last one that did found:
        # the run's time "found nowhere" runs on toward its resend.
        recovery._next_scan.pop(exp_id)
        assert recovery.recover(app, store, exp_id) == []
        first_seen = store.redis.hgetall(store.keys.unaccounted(exp_id))
        assert set(first_seen) == vanished
        assert recovery.recover(app, store, exp_id) == []
        assert store.redis.hgetall(store.keys.unaccounted(exp_id)) == first_seen
    finally:
        recovery._next_scan.pop(exp_id, None)
        store.redis.delete(queue)
