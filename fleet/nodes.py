"""The names of the Celery nodes one worker start splits into (worker.nodes): the
scheduler wakes each by name (a control message) as it stops them."""

from __future__ import annotations


def node_name(hostname: str, index: int) -> str:
    """The `index`-th node's name (from 1): `name@host` becomes `name.index@host`."""
    name, at, host = hostname.partition("@")
    return f"{name}.{index}{at}{host}"


def node_names(hostname: str, count: int) -> list[str]:
    return [node_name(hostname, index) for index in range(1, count + 1)]
