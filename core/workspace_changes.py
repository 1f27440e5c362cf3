"""What the agent changed in its workspace, as a short text for the judge prompt.

Files are compared with the scenario's template folder by size, then content
hash; without a template every file is listed. ``.git`` folders are skipped and
symlinks are compared by target, never followed.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

MAX_LINE_CHARS = 200


def summarize_changes(workspace: Path, template: Path | None, max_files: int = 50) -> str:
    """At most ``max_files`` lines of added/modified/deleted files, then a count of the rest."""
    files = _scan(workspace)
    if template is None or not template.is_dir():
        header = f"{len(files)} files in the workspace (no template to compare with)"
        if template is not None:
            header += f"; template folder {template} not found"
        lines = [f"  {path} ({_size(workspace / path)} bytes)" for path in sorted(files)]
        return _bounded(header, lines, max_files)

    before = _scan(template)
    added = sorted(files - before)
    deleted = sorted(before - files)
    modified = sorted(p for p in files & before if _differs(workspace / p, template / p))
    if not (added or deleted or modified):
        return "no changes relative to the template"
    header = (
        f"changes relative to the template: {len(added)} added, "
        f"{len(modified)} modified, {len(deleted)} deleted"
    )
    lines = (
        [f"  added: {p} ({_size(workspace / p)} bytes)" for p in added]
        + [
            f"  modified: {p} ({_size(template / p)} -> {_size(workspace / p)} bytes)"
            for p in modified
        ]
        + [f"  deleted: {p}" for p in deleted]
    )
    return _bounded(header, lines, max_files)


def _scan(root: Path) -> set[str]:
    found: set[str] = set()
    for folder, dirs, names in os.walk(root):
        base = Path(folder)
        # A symlink to a folder is an entry of its own, never walked into.
        links = [d for d in dirs if (base / d).is_symlink()]
        dirs[:] = [d for d in dirs if d != ".git" and d not in links]
        entries = [n for n in names if n != ".git"] + links
        found.update((base / name).relative_to(root).as_posix() for name in entries)
    return found


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def _differs(a: Path, b: Path) -> bool:
    try:
        if a.is_symlink() or b.is_symlink():
            return not (a.is_symlink() and b.is_symlink() and os.readlink(a) == os.readlink(b))
        return a.stat().st_size != b.stat().st_size or _digest(a) != _digest(b)
    except OSError:
        return True


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def _bounded(header: str, lines: list[str], max_files: int) -> str:
    shown = [line[:MAX_LINE_CHARS] for line in lines[:max_files]]
    if len(lines) > max_files:
        shown.append(f"  ... and {len(lines) - max_files} more")
    return "\n".join([header, *shown])
