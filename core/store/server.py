"""How the Redis server itself is set, where it breaks evalfleet's promises.

A broker that evicts keys when full drops queued runs and stored results without
an error; one that keeps nothing on disk loses every queued run and result when
it restarts. The embedded Redis is started right (scheduler.embedded); a shared
one is the user's, so evalfleet says what it sees, once per submit and worker.
"""

from __future__ import annotations

import time

import redis

from core.store.client import TextClient


def risky_settings(client: TextClient) -> list[str]:
    """One sentence per setting of the server that can lose runs or results, with the
    setting to change; none when it is set right or does not say (CONFIG disabled,
    as on some managed services)."""
    try:
        config = client.config_get("*")
    except redis.ResponseError:
        return []
    found = []
    policy = config.get("maxmemory-policy", "noeviction")
    if policy != "noeviction":
        found.append(
            f"the broker evicts keys when it is full (maxmemory-policy {policy}): queued "
            "runs and stored results can vanish without an error; set "
            "`maxmemory-policy noeviction` on it"
        )
    if _keeps_nothing(config):
        found.append(
            "the broker keeps nothing on disk (appendonly no, no save points): a restart "
            "loses every queued run and stored result; set `appendonly yes` on it"
        )
    return found


def restart_that_lost(client: TextClient, since: float) -> float | None:
    """When the server last started, where that was after `since` and it keeps nothing
    on disk: a restart that lost all written before it. None otherwise, or where the
    server does not say (CONFIG or INFO disabled)."""
    try:
        started = time.time() - int(client.info("server")["uptime_in_seconds"])
        # Whole seconds on both sides (the uptime, a stamp): a margin against a restart
        # just before the write. Most often it started long before: no CONFIG asked.
        if started <= since + 2:
            return None
        return started if _keeps_nothing(client.config_get("*")) else None
    except (redis.ResponseError, KeyError, ValueError):
        return None


def _keeps_nothing(config: dict[str, str]) -> bool:
    return config.get("appendonly", "yes") == "no" and not config.get("save", "x").strip()
