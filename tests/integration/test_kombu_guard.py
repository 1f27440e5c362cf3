"""fleet.kombu_guard, against the real Redis: a channel used after its broker
connection was closed under it fails with a connection error, which Celery
survives, not an AttributeError, which stops the worker; what it held stays. A
chord whose part or body meets the broker gone is said in one line."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery.app.task import Context
from kombu import Connection

from fleet import kombu_guard
from fleet.sending import AGGREGATE_TASK
from tests.conftest import QUEUE
from tests.support.fleet import free_port
from worker.celery_app import create_app

pytestmark = pytest.mark.integration  # the real Redis

kombu_guard.install()  # as create_app does for every worker and scheduler


@pytest.fixture
def held(redis_url: str) -> Iterator[tuple[Connection, str, str]]:
    """A connection holding one message unacknowledged, as a worker holds a run."""
    queue = f"{QUEUE}-guard-{uuid.uuid4().hex[:6]}"
    with Connection(redis_url) as conn:
        channel = conn.default_channel
        channel.queue_declare(queue)
        channel.basic_publish(channel.prepare_message('{"run": 1}'), "", queue)
        message = channel.basic_get(queue, no_ack=False)
        assert message is not None
        client = channel.client
        yield conn, queue, message.delivery_tag
        client.hdel(channel.unacked_key, message.delivery_tag)
        client.zrem(channel.unacked_index_key, message.delivery_tag)
        client.delete(queue)


@pytest.mark.parametrize("detached", ["transport", "channel"])
def test_a_channel_whose_connection_is_gone_raises_a_connection_error_and_keeps_messages(
    held: tuple[Connection, str, str], detached: str
) -> None:
    conn, queue, tag = held
    channel: Any = conn.default_channel  # kombu's Redis channel: untyped attributes
    client = channel.client
    assert client.hexists(channel.unacked_key, tag)
    # What Celery's close after a lost connection leaves behind, in its two shapes:
    # the channel's pools dropped, and the transport or the channel detached.
    channel._disconnect_pools()
    transport = channel.connection
    if detached == "transport":
        conn.transport.client = None
    else:
        channel.connection = None
    try:
        with pytest.raises(conn.connection_errors):
            channel.qos.restore_unacked()  # giving the message back, as the close does
        with pytest.raises(conn.connection_errors):
            channel.basic_ack(tag)  # a run that finished meanwhile
    finally:
        transport.client, channel.connection = conn, transport
    # Neither restored nor acknowledged: the sweep's to put back or drop.
    assert client.hexists(channel.unacked_key, tag) and client.llen(queue) == 0


def test_a_channel_keeps_one_client_per_pool_and_builds_a_new_one_after_its_pools_drop(
    held: tuple[Connection, str, str],
) -> None:
    conn, queue, tag = held
    channel: Any = conn.default_channel
    with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
        assert first is second and first.connection_pool is channel.pool
    mine = object()
    with channel.conn_or_acquire(mine) as given:
        assert given is mine  # a client passed in is used as it is
    channel._disconnect_pools()  # what Celery does when the connection is lost
    with channel.conn_or_acquire() as after:
        assert after is not first and after.connection_pool is channel.pool
        assert after.hexists(channel.unacked_key, tag) and after.llen(queue) == 0


def test_a_chord_whose_body_meets_the_broker_gone_is_said_in_one_line(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Celery completing a chord: its last part counted in the result backend (the real
    Redis), its body sent to a broker that is gone. Celery logs that with a traceback
    ("Chord callback ... raised"); here it is one warning that says what becomes of the
    experiment, and the task that finished the chord does not fail."""
    app = create_app(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    app.conf.result_backend = redis_url
    group = uuid.uuid4().hex
    body = app.signature(AGGREGATE_TASK, kwargs={"experiment_id": "gone"})
    body.freeze(group_id=group)
    app.backend.set_chord_size(group, 1)
    last_part = Context(id=uuid.uuid4().hex, group=group, group_index=0, chord=dict(body))
    with caplog.at_level(logging.INFO, logger="celery.backends.redis"):
        app.backend.on_chord_part_return(last_part, "SUCCESS", None)
    [said] = [r for r in caplog.records if "raised" in r.getMessage()]
    assert said.levelno == logging.WARNING and said.exc_info is None, said
    assert said.getMessage().startswith(f"Chord callback for '{group}' raised")
    assert said.getMessage().endswith(
        "the broker is unreachable; the recovery sweep reports its experiment once every "
        "run has a result"
    )


def test_a_chord_part_the_broker_cannot_count_is_skipped_in_one_line(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A run's task ends while the result backend (the broker's Redis) is gone: Celery's
    count of its chord part cannot be made. The task does not fail outside its body
    (with a traceback, twice); one line says the part was not counted."""
    app = create_app(redis_url)
    app.conf.result_backend = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    part = Context(id=uuid.uuid4().hex, group=uuid.uuid4().hex, group_index=0, chord={})
    with caplog.at_level(logging.INFO, logger=kombu_guard.__name__):
        app.backend.on_chord_part_return(part, "SUCCESS", None)
    [said] = [r for r in caplog.records if part.id in r.getMessage()]
    assert said.levelno == logging.WARNING and said.exc_info is None, said
    assert said.getMessage() == (
        f"the broker is unreachable: task {part.id} not counted toward its chord; the "
        "recovery sweep reports its experiment once every run has a result"
    )
