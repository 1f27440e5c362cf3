"""A worker must survive a Redis restart: a guard for kombu's Redis transport.

When Redis goes away, Celery closes the broker connection; closing its channel
gives back the messages the worker holds, and a run finishing meanwhile acks
its message. Either can reach the channel after kombu detached it from its
connection: kombu then builds a Redis client from a connection that is None
and raises AttributeError ("'NoneType' object has no attribute 'hostname'",
or '... 'client''; kombu issues #582 and #970, still so in 5.7). Celery
calls that unrecoverable and the worker exits, so one Redis restart could
take the whole fleet down with it.

Guarded, it is the connection error it really is, which Celery knows how to
live with: it reconnects, and the messages stay in Redis's unacknowledged set,
as they would had the worker been killed; the sweep puts each back once a lease
has passed, or drops it if its run has finished (worker/recovery.py).
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.transport import redis as kombu_redis

_connparams = kombu_redis.Channel._connparams


def _connparams_of_an_attached_channel(self: Any, asynchronous: bool = False) -> Any:
    if getattr(self.connection, "client", None) is None:
        raise redis.ConnectionError("the broker connection was closed")
    return _connparams(self, asynchronous)


def install() -> None:
    setattr(kombu_redis.Channel, "_connparams", _connparams_of_an_attached_channel)  # noqa: B010
