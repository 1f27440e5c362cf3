"""Walking a folder an agent may have shaped: os.walk's answers, without its recursion.

Python 3.11's os.walk calls itself once a level, so a tree nested deeper than the
interpreter's recursion limit (an agent's 3,000 folders, made in a second) raised
RecursionError out of whatever walked the run's workspace after the agent: the run
became an infrastructure error, kept out of the statistics, where its agent had
failed. This walk keeps the folders still to visit on a list instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator


def walk(
    top: str | os.PathLike[str], onerror: Callable[[OSError], None] | None = None
) -> Iterator[tuple[str, list[str], list[str]]]:
    """What `os.walk(top, onerror=onerror)` yields, in its order (top-down, depth
    first, links to folders listed among the folders and never walked into): each
    folder, its subfolders' names and its other names. As with os.walk, removing a
    name from the subfolders' list (in place) keeps the walk out of it."""
    pending = [os.fspath(top)]
    while pending:
        folder = pending.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError as exc:
            if onerror is not None:
                onerror(exc)
            continue
        dirs: list[str] = []
        names: list[str] = []
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            (dirs if is_dir else names).append(entry.name)
        yield folder, dirs, names
        below = (os.path.join(folder, name) for name in reversed(dirs))
        pending.extend(path for path in below if not os.path.islink(path))
