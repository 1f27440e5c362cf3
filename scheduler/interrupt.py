"""Telling an interrupt (Ctrl-C, or TERM and HUP, which the CLI raises as one) from a
failure, wherever in a command it lands. Standard library only: the console script
uses it before anything else is imported."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

# The interrupts this process received (catch): once one came, whatever ends the
# command came of it.
_received: list[int] = []
# Interrupts raised where Python drops exceptions, so that they ended nothing: in a
# weakref callback or a __del__ that an import or the garbage collector ran.
_lost: list[int] = []
_unraisable: Callable[[Any], object] = sys.unraisablehook  # what reports the others


def catch(*signums: int) -> None:
    """Each of `signums` raises KeyboardInterrupt, as Ctrl-C does, and is remembered:
    code that catches the KeyboardInterrupt and raises something else in its place
    still ends as an interrupt (pydantic's schema builder, in Rust, turns it into a
    SchemaError whose text alone names it). One that Python dropped is kept, without
    the traceback it would print, for `raise_if_lost`."""
    for signum in signums:
        signal.signal(signum, _raise)
    global _unraisable
    if sys.unraisablehook is not _dropped:
        _unraisable, sys.unraisablehook = sys.unraisablehook, _dropped


def raise_if_lost() -> None:
    """Raises the interrupt Python dropped, if one was: called where a command goes on
    with its work (before it starts or sends anything, and as it waits), so that a
    Ctrl-C landing in an import's clean-up still ends the command."""
    if _lost:
        _lost.clear()
        raise KeyboardInterrupt


def _dropped(unraisable: Any) -> None:
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        _lost.append(1)
        return
    _unraisable(unraisable)


def _raise(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)
    raise KeyboardInterrupt


@contextlib.contextmanager
def deferred(signum: int) -> Iterator[None]:
    """`signum` received inside the block is handled as it ends, not where it landed:
    for a step that must not be cut in two (a child process started, but not yet
    known to the code that will stop it)."""
    pending: list[int] = []
    previous = signal.signal(signum, lambda received, frame: pending.append(received))
    try:
        yield
    finally:
        signal.signal(signum, previous)
        if pending and callable(previous):
            previous(signum, None)


def interrupted(exc: BaseException) -> bool:
    """Whether `exc` is Ctrl-C (or TERM, HUP: scheduler.cli.run raises them as one) or
    came of one: an interrupt was received (catch), or `exc` has a KeyboardInterrupt
    along its causes (an import cut short by it can surface as another exception with
    the KeyboardInterrupt as its cause: pydantic's lazily imported attributes do)."""
    if _received:
        return True
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False
