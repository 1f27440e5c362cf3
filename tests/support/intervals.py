"""Every interval a report carries, checked against the range its figure can take: a rate
or a score in [0, 1], a difference of two in [-1, 1]."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

# A difference is printed signed ("[-0.104, +0.504]"), a rate or a score unsigned.
_PRINTED = re.compile(r"\[([+-]?)(\d+\.\d+), ([+-]?)(\d+\.\d+)\]")
# The JSON keys (on the way to an interval) whose figure is a difference.
_DIFFERENCES = ("risk_difference_ci", "cliffs_delta_ci", "like_these")


def impossible_printed(text: str) -> list[str]:
    """The intervals printed in `text` that hold an impossible value or are reversed."""
    wrong = []
    for m in _PRINTED.finditer(text):
        low = float(m[1] + m[2]) if m[1] else float(m[2])
        high = float(m[3] + m[4]) if m[3] else float(m[4])
        floor = -1.0 if m[1] or m[3] else 0.0
        if not floor <= low <= high <= 1.0:
            wrong.append(m[0])
    return wrong


def impossible_in_json(document: Any) -> list[str]:
    """The intervals (objects with low and high) of a report's JSON outside their range,
    each named by its path."""
    return [
        f"{path}: [{low}, {high}]"
        for path, low, high in _intervals(document, "")
        if not (-1.0 if any(k in path for k in _DIFFERENCES) else 0.0) <= low <= high <= 1.0
    ]


def _intervals(node: Any, path: str) -> Iterator[tuple[str, float, float]]:
    if isinstance(node, dict):
        if {"low", "high", "method"} <= node.keys():
            yield path, node["low"], node["high"]
        for key, value in node.items():
            yield from _intervals(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _intervals(value, f"{path}[{i}]")
