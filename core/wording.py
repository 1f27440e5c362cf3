"""Counts in words, one way everywhere: "1 run", "2 runs". Pure: the CLI's plan and
reports, and the report models' own notices, all say them."""

from __future__ import annotations


def plural(n: int, noun: str) -> str:
    """`n` and its noun, plural but for one: "1 run", "2 runs", "2 deliveries"."""
    if n == 1:
        return f"{n} {noun}"
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "i", "o", "u"):
        return f"{n} {noun[:-1]}ies"
    return f"{n} {noun}s"
