"""How the Redis server itself is set, where it breaks evalfleet's promises.

A broker that evicts keys when full drops queued runs and stored results without
an error; one that keeps nothing on disk loses every queued run and result when
it restarts. The embedded Redis is started right (scheduler.embedded); a shared
one is the user's, so evalfleet says what it sees, once per submit and worker.
"""

from __future__ import annotations

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
    if config.get("appendonly", "yes") == "no" and not config.get("save", "x").strip():
        found.append(
            "the broker keeps nothing on disk (appendonly no, no save points): a restart "
            "loses every queued run and stored result; set `appendonly yes` on it"
        )
    return found
