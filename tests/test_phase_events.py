"""Phase events for Flower (worker/phases.py), against the real Redis: a quick run's
phases travel together, in order, as one task.multi message."""

from __future__ import annotations

import base64
import json
import time
import uuid
from typing import Any

import pytest
import redis

from worker.celery_app import create_app
from worker.phases import LINGER_S, PhaseEvents

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
            sender.send("task-1", phase, run_id="r1")
        quick = _published(pubsub, LINGER_S + 1.0)
        sender.send("task-2", "judge", run_id="r2")  # later, on its own
        later = _published(pubsub, LINGER_S + 1.0)
    finally:
        pubsub.close()
    ours = [[e for e in m if e.get("hostname") == hostname] for m in quick]
    assert [[(e["type"], e["uuid"]) for e in m] for m in ours if m] == [
        [("task-setup", "task-1"), ("task-agent", "task-1"), ("task-gates", "task-1")]
    ]
    assert [e["run_id"] for e in ours[0]] == ["r1"] * 3
    alone = [[e["type"] for e in m if e.get("hostname") == hostname] for m in later]
    assert [m for m in alone if m] == [["task-judge"]]
