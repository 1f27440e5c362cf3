"""A verdict from the directions of a row's significant tests, the same for every kind of
comparison (a run-level one, or one across scenarios)."""

from __future__ import annotations

from core.results.report import Verdict


def direction(delta: float, p: float, alpha: float) -> int:
    """+1 significantly better, -1 significantly worse, 0 neither."""
    if p >= alpha or delta == 0:
        return 0
    return 1 if delta > 0 else -1


def verdict_of(directions: set[int]) -> Verdict:
    if {1, -1} <= directions:
        return Verdict.mixed
    if 1 in directions:
        return Verdict.better
    if -1 in directions:
        return Verdict.worse
    return Verdict.no_difference
