"""The order tiers and scenarios appear in, wherever a list of their ids is shown."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def ordered_ids(preferred: Sequence[str], seen: Iterable[str]) -> list[str]:
    """`preferred` (the experiment's order, duplicates dropped), then any other ids seen, sorted."""
    ordered = list(dict.fromkeys(preferred))
    return ordered + sorted(set(seen) - set(ordered))
