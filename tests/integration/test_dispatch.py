"""Submitting's messages, against the real Redis: each run's message as `scheduler.dispatch`
pushes it, through the scheduler's app that has no tasks (fleet.app), is the one Celery
and kombu would push for the same run through the worker's app, ids aside."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

import pytest

from core.matrix import Matrix, load_matrix
from core.store import Store
from fleet.app import fleet_app
from fleet.sending import RUN_TASK, run_options
from scheduler.dispatch import send
from scheduler.plan import experiment_info, plan
from tests.conftest import QUEUE
from worker.celery_app import create_app

pytestmark = pytest.mark.integration  # the real Redis

# Per run and per message: what the two ways may differ in (reply_to: the sending app's id).
IDS = (("headers", "id"), ("headers", "root_id"), ("properties", "correlation_id"),
       ("properties", "delivery_tag"), ("properties", "reply_to"))  # fmt: skip


def _matrix(folder: Path, other_queue: str) -> Matrix:
    path = folder / "matrix.yaml"
    path.write_text(
        "name: dispatch\nruns_per_tier: 3\nagent: {command: 'true', timeout_s: 30}\n"
        f"tiers: [{{id: T0}}, {{id: T1, queue: {other_queue}}}]\n"
        "scenarios: [{id: s, prompt: go}]\n"
    )
    return load_matrix(path)


def _without_ids(raw: str) -> dict:
    message = json.loads(raw)
    for part, key in IDS:
        assert message[part][key]
        message[part][key] = "-"
    message["body"] = json.loads(base64.b64decode(message["body"]))
    return message


def test_each_run_gets_the_message_celery_would_send(
    redis_url: str, store: Store, tmp_path: Path
) -> None:
    # Queues of its own, under the session's name (the conftest removes them): the
    # session's may hold what other tests' workers sent again after them.
    mine, other = f"{QUEUE}-dispatch", f"{QUEUE}-other"
    app = fleet_app(redis_url, default_queue=mine)
    # As in the scheduler's process, which imports no task: here the worker's tasks are
    # imported, and Celery gives every app their shared tasks.
    for name in [n for n in app.tasks if n.startswith("evalfleet.")]:
        app.tasks.unregister(name)
    matrix = _matrix(tmp_path, other)
    exp_id = f"dispatch-{uuid.uuid4().hex[:8]}"
    store.experiments.create(experiment_info(matrix, exp_id, matrix.total_runs()), matrix)
    specs = list(plan(matrix, exp_id))
    send(app, store, matrix, exp_id, specs, len(specs), record=True)

    ours = store.redis.lrange(mine, 0, -1)[::-1] + store.redis.lrange(other, 0, -1)[::-1]
    assert len(ours) == 6  # oldest first: the order workers take them in
    messages = [json.loads(m) for m in ours]
    group = messages[0]["headers"]["group"]
    # Interleaved by cell (T0 and T1 take turns), in order within each queue.
    assert [m["headers"]["group_index"] for m in messages] == [0, 2, 4, 1, 3, 5]
    assert len({m["headers"]["id"] for m in messages}) == 6
    assert len({m["properties"]["delivery_tag"] for m in messages}) == 6
    assert sorted(store.specs.all(exp_id), key=str) == sorted(specs, key=str)

    # Celery's own way, the worker's task, each message to the real Redis, for the same runs.
    store.redis.delete(mine, other)
    chord = _without_ids(ours[0])["body"][2]["chord"]  # the aggregate task, frozen in the group
    workers_app = create_app(redis_url, default_queue=mine)
    for index, spec in enumerate(specs):
        workers_app.tasks[RUN_TASK].apply_async(
            (spec.model_dump(mode="json"),),
            group_id=group,
            group_index=index,
            chord=workers_app.signature(chord),
            **run_options(matrix, spec),
        )
    celerys = store.redis.lrange(mine, 0, -1)[::-1] + store.redis.lrange(other, 0, -1)[::-1]
    store.redis.delete(mine, other)
    assert [_without_ids(m) for m in ours] == [_without_ids(m) for m in celerys]


def test_runs_are_planned_in_turns_across_tiers_and_scenarios(tmp_path: Path) -> None:
    """Run 0 of every cell, then run 1 of each...: every tier makes progress from the
    start (a budget that runs out cuts every tier, not the last ones whole)."""
    path = tmp_path / "matrix.yaml"
    path.write_text(
        "name: turns\nruns_per_tier: 2\nagent: {command: 'true', timeout_s: 30}\n"
        "tiers: [{id: T0}, {id: T1}]\n"
        "scenarios: [{id: a, prompt: go}, {id: b, prompt: go, runs: 3}]\n"
    )
    order = [(s.run_index, s.tier, s.scenario) for s in plan(load_matrix(path), "exp")]
    assert order == [
        (0, "T0", "a"), (0, "T0", "b"), (0, "T1", "a"), (0, "T1", "b"),
        (1, "T0", "a"), (1, "T0", "b"), (1, "T1", "a"), (1, "T1", "b"),
        (2, "T0", "b"), (2, "T1", "b"),
    ]  # fmt: skip
