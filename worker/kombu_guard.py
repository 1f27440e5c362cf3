"""A worker must survive a Redis restart: a guard for kombu's Redis transport.

When Redis goes away, Celery closes the broker connection, and closing its
channel gives back the messages the worker holds (`QoS.restore_unacked`). If
the transport was already detached from its connection by then, kombu builds
a Redis client from `transport.client`, which is None, and raises
AttributeError ('NoneType' object has no attribute 'hostname'; kombu issues
#582 and #970, still so in 5.7). Celery calls that unrecoverable and the
worker exits: one Redis restart could take the whole fleet down with it.

Guarded, the messages stay in Redis's unacknowledged set, as they would had
the worker been killed, and the sweep puts each back once a lease has passed
(worker/recovery.py); those whose runs this worker finishes meanwhile are
dropped there instead.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis as kombu_redis

log = logging.getLogger(__name__)

_restore_unacked = kombu_redis.QoS.restore_unacked


def _restore_unacked_unless_detached(self: Any, client: Any = None) -> Any:
    if client is None and getattr(self.channel.connection, "client", None) is None:
        log.warning(
            "the broker connection is gone: %d unacknowledged message(s) stay in Redis "
            "until the sweep puts them back",
            len(self._delivered),
        )
        return None
    return _restore_unacked(self, client)


def install() -> None:
    setattr(kombu_redis.QoS, "restore_unacked", _restore_unacked_unless_detached)  # noqa: B010
