"""A registry of named things at an extension point, filled where each thing is defined.

As Inspect AI's `_util/registry.py` sits behind `@scorer` and `@metric` (a decorator
adds the object under its name, a lookup finds it by name), but smaller: one typed
registry per kind of thing (gate types and their evaluators, transcript formats), so
a lookup needs no cast, and no entry points or namespaces (every thing is
evalfleet's own). The tables, Literals and YAML tags that once spelled each kind
out by hand are derived from its registry; a completeness test
(tests/unit/test_extension_points.py) fails when a registered thing lacks a piece.

Registration order is kept: it is visible (the order of a JSON schema's `oneOf`).
A name registered twice is a programming error, refused as the module defining the
second one is imported.

Pure: imports nothing of evalfleet's, so every package may register here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TypeVar

T = TypeVar("T")


class Registry(Mapping[str, T]):
    """Name -> thing, in registration order; `kind` names the things in errors."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._things: dict[str, T] = {}

    def add(self, name: str, thing: T) -> T:
        if name in self._things:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._things[name] = thing
        return thing

    def __getitem__(self, name: str) -> T:
        try:
            return self._things[name]
        except KeyError:
            raise KeyError(
                f"unknown {self.kind} {name!r}: registered are {', '.join(self._things)}"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._things)

    def __len__(self) -> int:
        return len(self._things)

    def names(self) -> tuple[str, ...]:
        return tuple(self._things)
