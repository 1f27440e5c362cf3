"""Task events for Flower, against the real Redis: a quick run's phases (worker.phases)
and a worker's received/started/succeeded events (worker.task_events) travel
together, in order, as task.multi messages, and none is lost when a worker stops."""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from core.store import Store
from tests.conftest import QUEUE, SESSION, StartWorker, run_cli
from tests.support.experiments import command_matrix
from tests.support.fleet import wait_until
from worker.celery_app import create_app
from worker.phases import PhaseEvents, linger_s

pytestmark = pytest.mark.integration  # the real Redis


def _published(pubsub: redis.client.PubSub, seconds: float) -> list[list[dict[str, Any]]]:
    """The task-event messages published in the next `seconds`, each its events."""
    messages = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        message = pubsub.get_message(timeout=left)
        if message is not None and message["type"] == "pmessage":
            body = json.loads(base64.b64decode(json.loads(message["data"])["body"]))
            messages.append(body if isinstance(body, list) else [body])
    return messages


def test_a_quick_runs_phases_are_one_message_in_order(redis_url: str) -> None:
    app = create_app(redis_url)
    hostname = f"phases-{uuid.uuid4().hex[:6]}@test"
    pubsub = redis.Redis.from_url(redis_url).pubsub(ignore_subscribe_messages=True)
    pubsub.psubscribe("*celeryev/task.*")
    try:
        sender = PhaseEvents(app, hostname)
        for phase in ("setup", "agent", "gates"):
            sender.send("task-1", phase, "evalfleet.run", run_id="r1")
        quick = _published(pubsub, linger_s() + 1.0)
        sender.send("task-2", "judge", "evalfleet.run", run_id="r2")  # later, on its own
        later = _published(pubsub, linger_s() + 1.0)
    finally:
        pubsub.close()
    # Pub/sub spans the server's databases: other tests' workers publish here too.
    ours = [mine for m in quick if (mine := [e for e in m if e.get("hostname") == hostname])]
    assert [[(e["type"], e["uuid"]) for e in m] for m in ours] == [
        [("task-setup", "task-1"), ("task-agent", "task-1"), ("task-gates", "task-1")]
    ]
    assert [e["run_id"] for e in ours[0]] == ["r1"] * 3
    # Each names its task: Flower's metrics are labelled by the event's own name.
    assert {e["name"] for e in ours[0]} == {"evalfleet.run"}
    alone = [[e["type"] for e in m if e.get("hostname") == hostname] for m in later]
    assert [m for m in alone if m] == [["task-judge"]]


def test_a_workers_task_events_travel_together_and_its_last_leave_with_it(
    redis_url: str, fleet_env: dict[str, str], start_worker: StartWorker, store: Store,
    tmp_path: Path,
) -> None:  # fmt: skip
    """worker.task_events: received/started/succeeded of a worker's runs go out
    batched, every run's all three, and what is buffered when the worker stops is
    published as it stops. The linger (60 s) outlasts the test: only the stop can
    have published them, and its message is the only one. A queue of its own: the
    session's may hold other tests' leftovers, whose events would fill the buffer."""
    queue = f"{QUEUE}-events"  # under the session's name: the conftest removes it
    env = {**fleet_env, "EVALFLEET_QUEUE": queue}
    pubsub = redis.Redis.from_url(redis_url).pubsub(ignore_subscribe_messages=True)
    pubsub.psubscribe("*celeryev/task.*")
    try:
        worker = start_worker(
            {"EVALFLEET_EVENTS_LINGER_S": "60", "EVALFLEET_QUEUE": queue},
            concurrency=1,
            name="evt",
            queues=queue,
        )
        matrix = command_matrix(tmp_path, "touch out.txt", runs=3)
        submitted = run_cli("submit", str(matrix), env=env)
        assert submitted.returncode == 0, submitted.stderr
        exp_id = submitted.stdout.strip()
        wait_until(lambda: store.reports.get(exp_id), "the report", timeout=60)
        before_stop = _published(pubsub, 0.5)
        worker.stop()
        messages = _published(pubsub, 1.0)
    finally:
        pubsub.close()
    ours = [
        [e for e in m if str(e.get("hostname", "")).startswith(f"evt-{SESSION}-")] for m in messages
    ]
    events = [e for m in ours for e in m if e["type"] in ("task-received", "task-started",
                                                          "task-succeeded")]  # fmt: skip
    names = {e["uuid"]: e["name"] for e in events if e["type"] == "task-received"}
    assert sorted(names.values()) == ["evalfleet.aggregate", *["evalfleet.run"] * 3]
    for task_id in names:
        kinds = [e["type"] for e in events if e["uuid"] == task_id]
        assert kinds == ["task-received", "task-started", "task-succeeded"], kinds
    carrying = [m for m in ours if any(e["type"] == "task-received" for e in m)]
    assert len(carrying) == 1  # all of them, in the message its stop published
    ours_before = [e for m in before_stop for e in m if str(e.get("hostname", "")).startswith(
        f"evt-{SESSION}-") and e["type"].startswith("task-")]  # fmt: skip
    assert ours_before == []  # held for the linger


def test_the_embedded_modes_worker_sends_no_event_and_runs_its_runs(
    redis_url: str, fleet_env: dict[str, str], start_worker: StartWorker, store: Store,
    tmp_path: Path,
) -> None:  # fmt: skip
    """`--without-events`, as LocalWorkers starts the worker on the CLI's own Redis,
    where no Flower can watch: its runs run and pass, and not one task or phase event
    of its is published, while it runs them or as it stops."""
    queue = f"{QUEUE}-quiet"  # under the session's name: the conftest removes it
    env = {**fleet_env, "EVALFLEET_QUEUE": queue}
    pubsub = redis.Redis.from_url(redis_url).pubsub(ignore_subscribe_messages=True)
    pubsub.psubscribe("*celeryev/task.*")
    try:
        worker = start_worker(
            {"EVALFLEET_QUEUE": queue}, concurrency=1, name="quiet", queues=queue, events=False
        )
        matrix = command_matrix(tmp_path, "touch out.txt", runs=3)
        submitted = run_cli("submit", str(matrix), env=env)
        assert submitted.returncode == 0, submitted.stderr
        exp_id = submitted.stdout.strip()
        report = wait_until(lambda: store.reports.get(exp_id), "the report", timeout=60)
        messages = _published(pubsub, linger_s() + 0.5)
        worker.stop()
        messages += _published(pubsub, 1.0)
    finally:
        pubsub.close()
    assert report.tiers["T0"].passes == 3
    ours = [
        e for m in messages for e in m if str(e.get("hostname", "")).startswith(f"quiet-{SESSION}-")
    ]
    assert ours == []
