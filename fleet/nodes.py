"""The names of the Celery nodes one worker start splits into (worker.nodes): the
scheduler wakes each by name (a control message) as it stops them."""

from __future__ import annotations

import sys

# Where a start splits (worker.nodes waits on signals with sigwaitinfo and has its nodes
# follow it with PR_SET_PDEATHSIG, Linux's alone); elsewhere it is one node.
SPLITS = sys.platform == "linux"


def node_name(hostname: str, index: int) -> str:
    """The `index`-th node's name (from 1): `name@host` becomes `name.index@host`."""
    name, at, host = hostname.partition("@")
    return f"{name}.{index}{at}{host}"


def node_names(hostname: str, count: int) -> list[str]:
    """The names of the nodes a start of `count` slots runs (`--split`): one slot, or
    where a start does not split, the one node under the name given."""
    if count == 1 or not SPLITS:
        return [hostname]
    return [node_name(hostname, index) for index in range(1, count + 1)]
