"""kombu's Redis transport, mended three times: a worker must survive a Redis restart
and a full Redis, and a run must not pay for a new Redis client at every broker call.

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

A full Redis (maxmemory, noeviction) refuses every MULTI, even one of deletes,
and kombu acks a message with ZREM and HDEL in one: the ack raised
OutOfMemoryError, which Celery also calls unrecoverable, and a full broker took
the fleet down. The ack's two deletes go without a transaction (each is safe
alone: kombu's visibility sweep skips an index entry without its message), and
a refused write of kombu's (a requeue, a restore) is a connection error, after
which the message stays unacknowledged for the sweep.

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

import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

log = logging.getLogger(__name__)

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


def _remove_from_indices_without_multi(self: Any, delivery_tag: str, pipe: Any = None) -> Any:
    if pipe is not None:  # part of a transaction of kombu's own (a restore)
        return _remove_from_indices(self, delivery_tag, pipe)
    with self.channel.conn_or_acquire() as client:
        pipe = client.pipeline(transaction=False)
        return pipe.zrem(self.unacked_index_key, delivery_tag).hdel(self.unacked_key, delivery_tag)


# A full Redis refusing a write, alone or in a MULTI (whose EXEC is then aborted).
REFUSED = (redis.OutOfMemoryError, redis.exceptions.ExecAbortError)


def _refused_writes_as_connection_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except REFUSED as exc:
            raise redis.ConnectionError(f"the broker refuses writes: {exc}") from exc

    return guarded


def _append_even_when_full(self: Any, message: Any, delivery_tag: str) -> None:
    """The message was popped from its queue; a full Redis refuses its record among the
    unacknowledged. It runs all the same: should this worker die, the sweep finds its
    run nowhere and sends it again (worker.recovery)."""
    try:
        _ORIGINALS["append"](self, message, delivery_tag)
    except REFUSED as exc:
        log.warning("message %s taken without its unacknowledged record: %s", delivery_tag, exc)
        virtual.QoS.append(self, message, delivery_tag)  # kept in memory, to be acked


_remove_from_indices = kombu_redis.QoS._remove_from_indices
_GUARDED = ("ack", "reject", "restore_by_tag", "restore_unacked", "restore_visible")
_ORIGINALS: dict[str, Callable[..., Any]] = {}


def install() -> None:
    setattr(kombu_redis.Channel, "_connparams", _connparams_of_an_attached_channel)  # noqa: B010
    setattr(kombu_redis.Channel, "conn_or_acquire", _client_of_the_pool)  # noqa: B010
    qos = kombu_redis.QoS
    setattr(qos, "_remove_from_indices", _remove_from_indices_without_multi)  # noqa: B010
    for name in _GUARDED:  # each wrapped once, however often an app is built
        original = _ORIGINALS.setdefault(name, getattr(qos, name))
        setattr(qos, name, _refused_writes_as_connection_errors(original))
    _ORIGINALS.setdefault("append", qos.append)
    setattr(qos, "append", _append_even_when_full)  # noqa: B010
