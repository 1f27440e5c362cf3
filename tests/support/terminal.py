"""Reading the CLI's terminal tables (`list`, `status`, the report) and its planning
lines as a reader does, and running it in a terminal of its own."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios
from collections.abc import Mapping, Sequence


def in_terminal(
    argv: Sequence[str], env: Mapping[str, str], rows: int = 50, columns: int = 90
) -> str:
    """What `argv` prints on stdout to a pseudo-terminal of this size (it must exit 0),
    as the bytes' text, carriage returns and all."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    with subprocess.Popen(
        list(argv), stdout=follower, stderr=subprocess.PIPE, env=dict(env)
    ) as process:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the process closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert process.wait(timeout=120) == 0, process.stderr.read() if process.stderr else ""
    os.close(leader)
    return b"".join(chunks).decode(errors="replace")


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


def planning_lines(text: str) -> list[str]:
    """The planning `validate`, `preflight` and `resume` print: its "planning:" line and
    the indented lines under it."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("planning: ")), None)
    assert start is not None, f"no planning in: {text}"
    end = next(
        (i for i in range(start + 1, len(lines)) if not lines[i].startswith("  ")), len(lines)
    )
    return lines[start:end]
