"""What the agent changed in its workspace, as a short text for the judge prompt.

The workspace is fingerprinted once it is ready for the agent (template copy,
tier files, setup commands: `snapshot`) and compared with what is there after
the agent (`summarize_changes`), so what the run prepared is not reported as
the agent's work. A file's fingerprint is its content hash, or for a file over
HASH_LIMIT bytes its size and modification time. ``.git`` folders are skipped
and symlinks are compared by target, never followed.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

MAX_LINE_CHARS = 200
HASH_LIMIT = 1 << 20

# Relative path -> (size, fingerprint); a symlink's fingerprint is its target.
Snapshot = dict[str, tuple[int, str]]


def snapshot(root: Path) -> Snapshot:
    """Every file and symlink under `root` with its size and fingerprint."""
    return {path: _fingerprint(root / path) for path in _scan(root)}


def summarize_changes(workspace: Path, before: Snapshot | None, max_files: int = 50) -> str:
    """At most ``max_files`` lines of added/modified/deleted files, then a count of the rest."""
    after = snapshot(workspace)
    if before is None:
        header = f"{len(after)} files in the workspace (nothing to compare with)"
        lines = [f"  {path} ({size} bytes)" for path, (size, _) in sorted(after.items())]
        return _bounded(header, lines, max_files)

    added = sorted(after.keys() - before.keys())
    deleted = sorted(before.keys() - after.keys())
    modified = sorted(p for p in after.keys() & before.keys() if after[p] != before[p])
    if not (added or deleted or modified):
        return "no changes since the workspace was prepared"
    header = (
        f"changes since the workspace was prepared: {len(added)} added, "
        f"{len(modified)} modified, {len(deleted)} deleted"
    )
    lines = (
        [f"  added: {p} ({after[p][0]} bytes)" for p in added]
        + [f"  modified: {p} ({before[p][0]} -> {after[p][0]} bytes)" for p in modified]
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


def _fingerprint(path: Path) -> tuple[int, str]:
    try:
        info = path.lstat()
        if path.is_symlink():
            return info.st_size, "-> " + os.readlink(path)
        if info.st_size > HASH_LIMIT:
            return info.st_size, f"mtime {info.st_mtime_ns}"
        return info.st_size, hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:  # gone meanwhile, or unreadable: differs from anything
        return 0, "unreadable"


def _bounded(header: str, lines: list[str], max_files: int) -> str:
    shown = [line[:MAX_LINE_CHARS] for line in lines[:max_files]]
    if len(lines) > max_files:
        shown.append(f"  ... and {len(lines) - max_files} more")
    return "\n".join([header, *shown])
