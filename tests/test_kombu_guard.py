"""worker/kombu_guard.py, against the real Redis: a worker whose broker connection
was closed under it keeps running, and the messages it held stay in Redis."""

from __future__ import annotations

import uuid

from kombu import Connection

import worker.app  # noqa: F401  (installs the guard, as every worker and scheduler does)
from tests.conftest import QUEUE


def test_restoring_unacked_messages_on_a_detached_connection_leaves_them_in_redis(
    redis_url: str,
) -> None:
    queue = f"{QUEUE}-guard-{uuid.uuid4().hex[:6]}"
    with Connection(redis_url) as conn:
        channel = conn.default_channel
        channel.queue_declare(queue)
        channel.basic_publish(channel.prepare_message('{"run": 1}'), "", queue)
        message = channel.basic_get(queue, no_ack=False)  # held, as a worker holds a run
        assert message is not None
        tag = message.delivery_tag
        client = channel.client
        assert client.hexists(channel.unacked_key, tag)

        conn.transport.client = None  # what Celery's close on a lost connection leaves
        channel.qos.restore_unacked()  # unguarded: AttributeError, and the worker exits
        # Neither restored nor dropped: the sweep's to put back.
        assert client.hexists(channel.unacked_key, tag) and client.llen(queue) == 0
        client.hdel(channel.unacked_key, tag)
        client.zrem(channel.unacked_index_key, tag)
        client.delete(queue)
