"""Tables as GitHub-flavoured markdown, and text that cannot break them."""

from __future__ import annotations

import re

from scheduler.report.formatting import Table

# `<` opening an HTML tag in markdown (a user's text), not `<0.001`.
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")


def md(text: str) -> str:
    """Cell text that cannot break a pipe table or open an HTML tag (a user's experiment
    name); `<0.001` stays as it is."""
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    return _TAG_START.sub("&lt;", text)


def table_lines(table: Table) -> list[str]:
    """The pipe table: header, separator, rows."""
    return [
        "| " + " | ".join(md(c) for c in table.columns) + " |",
        "|" + "---|" * len(table.columns),
        *("| " + " | ".join(md(v) for v in row) + " |" for row in table.rows),
    ]
