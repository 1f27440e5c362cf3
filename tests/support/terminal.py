"""Reading the CLI's terminal tables (`list`, `status`, the report) as a reader does."""

from __future__ import annotations

import re


def table_row(text: str, first: str) -> list[str]:
    """The cells of the row whose first cell is `first` (cells stand two spaces apart)."""
    for line in text.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in:\n{text}")


def heading_words(text: str) -> set[str]:
    """The words of a table's headings, above its rule (a heading may wrap)."""
    return set(text.split("─", 1)[0].split())
