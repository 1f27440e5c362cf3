"""kombu's Redis transport, mended twice: a worker must survive a Redis restart, and
a run must not pay for a new Redis client at every broker call.

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
has passed, or drops it if its run has finished (worker.recovery).

kombu's channel builds a new redis-py client for each publish, ack and
reservation (`conn_or_acquire`), and redis-py 8 fills a table of some 300
response callbacks for every client it builds: ~0.1 ms of CPU each time, five
to eight times a run (the task events, the ack, the unacked entry), a fifth of
a worker's main process. The channel keeps one client per connection pool
instead: the same pool, so the same connections as before. When Celery drops
the channel's pools (a lost connection), the next call builds its client anew,
through the guard above.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from kombu.transport import redis as kombu_redis

_connparams = kombu_redis.Channel._connparams


def _connparams_of_an_attached_channel(self: Any, asynchronous: bool = False) -> Any:
    if getattr(self.connection, "client", None) is None:
        raise redis.ConnectionError("the broker connection was closed")
    return _connparams(self, asynchronous)


@contextmanager
def _client_of_the_pool(self: Any, client: Any = None) -> Iterator[Any]:
    if client:
        yield client
        return
    pool = self.pool  # a new pool after Celery dropped the old one: through the guard
    kept = self.__dict__.get("_evalfleet_client")
    if kept is None or kept.connection_pool is not pool:
        kept = self.__dict__["_evalfleet_client"] = self._create_client()
    yield kept


def install() -> None:
    setattr(kombu_redis.Channel, "_connparams", _connparams_of_an_attached_channel)  # noqa: B010
    setattr(kombu_redis.Channel, "conn_or_acquire", _client_of_the_pool)  # noqa: B010
