"""Counts in words, one way everywhere: "1 run", "2 runs". Pure: the CLI's plan and
reports, and the report models' own notices, all say them."""

from __future__ import annotations


def plural(n: int, noun: str) -> str:
    """`n` and its noun, plural but for one: "1 run", "2 runs"."""
    return f"{n} {noun}" + ("" if n == 1 else "s")
