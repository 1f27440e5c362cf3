"""Building evalfleet's pydantic models ahead of their first use.

A model whose annotations name a class imported only for type checking (the
store's, the report's tables' and the metrics' models name the matrix's so, to
keep the commands that only print light) is built by pydantic at its first
validation: ~70 ms for the fourteen such models, paid by each command and by
each pool process at its first run. A process that imports once and forks
many (the warm process, a worker before its pool forks) builds them once.
"""

from __future__ import annotations

import contextlib

from pydantic import BaseModel, PydanticUserError

_OURS = ("core.", "fleet.", "worker.", "scheduler.", "evalfleet.")


def complete() -> int:
    """Builds each imported model of evalfleet's that pydantic deferred; how many."""
    built = 0
    pending = list(BaseModel.__subclasses__())
    while pending:
        model = pending.pop()
        pending.extend(model.__subclasses__())
        if model.__module__.startswith(_OURS) and not model.__pydantic_complete__:
            # One that names a model not imported yet stays deferred, as it would be.
            with contextlib.suppress(PydanticUserError, NameError):
                built += bool(model.model_rebuild())
    return built
