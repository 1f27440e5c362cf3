"""kombu's Redis transport (and Celery's Redis backend), mended: a worker must survive a
Redis restart and a full Redis, and a run must not pay for a new Redis client at every
broker call.

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
has passed, or drops it if its run has finished (fleet.recovery).

A full Redis (maxmemory, noeviction) refuses every MULTI, even one of deletes,
and kombu acks a message with ZREM and HDEL in one: the ack raised
OutOfMemoryError, which Celery also calls unrecoverable, and a full broker took
the fleet down. The ack's two deletes go without a transaction (each is safe
alone: kombu's visibility sweep skips an index entry without its message), and
a refused restore of kombu's is a connection error, after which the message
stays unacknowledged for the sweep.

kombu's channel builds a new redis-py client for each publish, ack and
reservation (`conn_or_acquire`), and redis-py 8 fills a table of some 300
response callbacks for every client it builds: ~0.1 ms of CPU each time, five
to eight times a run (the task events, the ack, the unacked entry), a fifth of
a worker's main process. The channel keeps one client per connection pool
instead: the same pool, so the same connections as before. When Celery drops
the channel's pools (a lost connection), the next call builds its client anew,
through the guard above.

A message is the worker's until its ack or reject succeeds: kombu counts it
against the prefetch limit until then. A full Redis refuses a reject's requeue
(a write); Celery logged "Couldn't reject" and went on, and the message stayed
counted forever. Two such, the prefetch of a two-process worker was spent: the
worker never fetched again, though the broker had room long since, and its
experiment waited for another worker. A refused ack or reject now gives the
message up here (the sweep puts it back, sends its run again, or drops it: it is
still among the unacknowledged, or nowhere), in one line, and the worker takes
the next. Celery's count of a finished chord part, a Lua script a full Redis
refuses, is skipped the same way (the chord then never fires; the sweep reports
the experiment once every run has a result): it failed the task outside its
body, with a traceback in the log twice over.

The broker going away (a restart, a partition) or filling up while Celery completes
a chord (its last part counted, the body sent, the chord's keys tidied) is no bug
of anyone's either: Celery logged it with a traceback ("Chord ... raised"), and
with the broker still away the failure's own bookkeeping raised out of the task.
Both are one line now; a body that was not sent is the sweep's.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
from celery.backends import redis as celery_redis
from kombu.exceptions import OperationalError
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

from core.store.client import refused_write

log = logging.getLogger(__name__)

_connparams: Callable[..., Any] = kombu_redis.Channel._connparams


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


class BrokerRefuses(redis.ConnectionError):
    """A write of kombu's that a full Redis refused, as the connection error Celery lives with."""


def _refused_writes_as_connection_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except REFUSED as exc:
            raise BrokerRefuses(f"the broker refuses writes: {exc}") from exc

    return guarded


def _append_even_when_full(self: Any, message: Any, delivery_tag: str) -> None:
    """The message was popped from its queue; a full Redis refuses its record among the
    unacknowledged. It runs all the same: should this worker die, the sweep finds its
    run nowhere and sends it again (fleet.recovery)."""
    try:
        _ORIGINALS["append"](self, message, delivery_tag)
    except REFUSED as exc:
        log.warning("message %s taken without its unacknowledged record: %s", delivery_tag, exc)
        virtual.QoS.append(self, message, delivery_tag)  # kept in memory, to be acked


def _settled_even_when_refused(name: str) -> Callable[..., Any]:
    """kombu's `ack` or `reject`, which a full Redis may refuse: the message is then given
    up by this worker all the same, so that it stops counting against the prefetch."""
    settle = _ORIGINALS[name]
    done = {"ack": "acknowledged", "reject": "given back to its queue"}[name]

    @functools.wraps(settle)
    def settled(self: Any, delivery_tag: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return settle(self, delivery_tag, *args, **kwargs)
        except (*REFUSED, BrokerRefuses):  # a reject's requeue is a guarded restore
            virtual.QoS.ack(self, delivery_tag)  # only this worker's count of it
            log.warning(
                "the broker is full and refuses writes: message %s not %s; it is left to "
                "the recovery sweep, and this worker takes the next",
                delivery_tag,
                done,
            )
        return None

    return settled


def broker_failed(exc: BaseException) -> str | None:
    """What the broker did, when `exc` is the broker gone or full rather than a bug."""
    if refused_write(exc):
        return "the broker is full and refuses writes"
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, OperationalError)):
        return "the broker is unreachable"
    return None


def _chord_part_skipped_when_the_broker_fails(
    self: Any, request: Any, *args: Any, **kwargs: Any
) -> Any:
    try:
        return _ORIGINALS["chord part"](self, request, *args, **kwargs)
    except Exception as exc:
        failed = broker_failed(exc)
        if failed is None:
            raise
        log.warning(
            "%s: task %s not counted toward its chord; the recovery sweep reports its "
            "experiment once every run has a result",
            failed,
            request.id,
        )
    return None


class _BrokerFailuresInALine(logging.Filter):
    """A library's log of the broker gone or full, without its traceback: what happened,
    and what comes of it (`then`). Celery's of a chord ("Chord ... raised"), kombu's of
    a binding refresh a full Redis refused (kombu 5.7: it tries again on its own)."""

    def __init__(self, then: str):
        super().__init__()
        self.then = then

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        failed = None if exc is None else broker_failed(exc)
        if failed is not None:
            record.msg = f"{record.getMessage()}: {failed}; {self.then}"
            record.args = None
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


_remove_from_indices: Callable[..., Any] = kombu_redis.QoS._remove_from_indices
_GUARDED = ("restore_by_tag", "restore_unacked", "restore_visible")
_SETTLING = ("ack", "reject")
_ORIGINALS: dict[str, Callable[..., Any]] = {}


def install() -> None:
    setattr(kombu_redis.Channel, "_connparams", _connparams_of_an_attached_channel)  # noqa: B010
    setattr(kombu_redis.Channel, "conn_or_acquire", _client_of_the_pool)  # noqa: B010
    qos = kombu_redis.QoS
    setattr(qos, "_remove_from_indices", _remove_from_indices_without_multi)  # noqa: B010
    for name in _GUARDED:  # each wrapped once, however often an app is built
        original = _ORIGINALS.setdefault(name, getattr(qos, name))
        setattr(qos, name, _refused_writes_as_connection_errors(original))
    for name in _SETTLING:
        _ORIGINALS.setdefault(name, getattr(qos, name))
        setattr(qos, name, _settled_even_when_refused(name))
    backend = celery_redis.RedisBackend
    _ORIGINALS.setdefault("chord part", backend.on_chord_part_return)
    setattr(backend, "on_chord_part_return", _chord_part_skipped_when_the_broker_fails)  # noqa: B010
    for logger, then in (
        (celery_redis.__name__, "the recovery sweep reports its experiment once every run "
         "has a result"),
        (kombu_redis.__name__, "kombu tries again"),
    ):  # fmt: skip
        said = logging.getLogger(logger)
        if not any(isinstance(f, _BrokerFailuresInALine) for f in said.filters):
            said.addFilter(_BrokerFailuresInALine(then))
    _ORIGINALS.setdefault("append", qos.append)
    setattr(qos, "append", _append_even_when_full)  # noqa: B010
