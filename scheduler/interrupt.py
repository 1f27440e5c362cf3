"""Telling an interrupt (Ctrl-C, or TERM and HUP, which the CLI raises as one) from a
failure, wherever in a command it lands. Imports nothing: the console script uses it
before anything else is imported."""

from __future__ import annotations


def interrupted(exc: BaseException) -> bool:
    """Whether `exc` is Ctrl-C (or TERM, HUP: scheduler.cli.run raises them as one) or
    came of one: an import cut short by it can surface as another exception with the
    KeyboardInterrupt as its cause (pydantic's lazily imported attributes do)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False
