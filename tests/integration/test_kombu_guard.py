"""fleet.kombu_guard, against the real Redis: a channel used after its broker
connection was closed under it fails with a connection error, which Celery
survives, not an AttributeError, which stops the worker; what it held stays."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kombu import Connection

from fleet import kombu_guard
from tests.conftest import QUEUE

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
