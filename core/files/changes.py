"""What the agent changed in its workspace: a short text for the judge prompt, and
a unified diff of its text changes for the run's evidence.

The workspace is fingerprinted once it is ready for the agent (template copy,
tier files, setup commands: `snapshot`) and compared with what is there after
the agent (`summarize_changes`, `patch`), so what the run prepared is not
reported as the agent's work. A file's fingerprint is its content hash, or for a
file over HASH_LIMIT bytes its size and modification time. ``.git`` folders are
skipped and symlinks are compared by target, never followed; other special
files (a FIFO, a socket) by their type, never opened. A snapshot also keeps the
contents of small text files (TEXT_LIMIT each, TEXTS_BUDGET in all), which is
what a diff needs of the before side.

A path is kept as the operating system gave it (so the file can be opened) and
shown through core.evidence.text.encodable: an agent may name a file with any
bytes, and its name is shown with the undecodable ones escaped.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from core.evidence.text import encodable
from core.files.tree import walk
from core.wording import plural

MAX_LINE_CHARS = 200
HASH_LIMIT = 1 << 20
TEXT_LIMIT = 256 * 1024
TEXTS_BUDGET = 8 * 1024 * 1024


@dataclass
class Snapshot:
    """Relative path -> (size, fingerprint) of every file and symlink (a symlink's
    fingerprint is its target), and the contents of the small text files."""

    files: dict[str, tuple[int, str]]
    texts: dict[str, str] = field(default_factory=dict)


def snapshot(root: Path) -> Snapshot:
    """Every file and symlink under `root` with its size and fingerprint."""
    taken = Snapshot({path: _fingerprint(root / path) for path in _scan(root)})
    budget = TEXTS_BUDGET
    for path, (size, _) in sorted(taken.files.items()):
        file = root / path
        if size > min(TEXT_LIMIT, budget) or file.is_symlink() or not file.is_file():
            continue
        text = _text(file)
        if text is not None:
            taken.texts[path] = text
            budget -= size
    return taken


def summarize_changes(
    workspace: Path, before: Snapshot | None, max_files: int = 50, after: Snapshot | None = None
) -> str:
    """At most ``max_files`` lines of added/modified/deleted files, then a count of the rest.
    `after`: the workspace's snapshot when the caller took it already."""
    files = (after or snapshot(workspace)).files
    if before is None:
        header = f"{plural(len(files), 'file')} in the workspace (nothing to compare with)"
        lines = [
            f"  {encodable(p)} ({plural(size, 'byte')})" for p, (size, _) in sorted(files.items())
        ]
        return _bounded(header, lines, max_files)

    added, modified, deleted = _changed(before, files)
    if not (added or deleted or modified):
        return "no changes since the workspace was prepared"
    header = (
        f"changes since the workspace was prepared: {len(added)} added, "
        f"{len(modified)} modified, {len(deleted)} deleted"
    )
    lines = (
        [f"  added: {encodable(p)} ({plural(files[p][0], 'byte')})" for p in added]
        + [
            f"  modified: {encodable(p)} ({before.files[p][0]} -> {plural(files[p][0], 'byte')})"
            for p in modified
        ]
        + [f"  deleted: {encodable(p)}" for p in deleted]
    )
    return _bounded(header, lines, max_files)


def patch(before: Snapshot | None, after: Snapshot, max_chars: int) -> str:
    """A unified diff of the text files added, modified and deleted, stopped (with a
    note) once it is `max_chars` long; a file whose contents a snapshot did not keep
    (binary, large) gets one line saying so. Without `before`, nothing to compare."""
    if before is None:
        return ""
    added, modified, deleted = _changed(before, after.files)
    parts: list[str] = []
    length = 0
    for path in sorted([*added, *modified, *deleted]):
        old, new = before.texts.get(path), after.texts.get(path)
        shown = encodable(path)
        if (path in before.files and old is None) or (path in after.files and new is None):
            part = f"Binary or large file {shown} changed\n"
        else:
            lines = difflib.unified_diff(
                (old or "").splitlines(),
                (new or "").splitlines(),
                f"a/{shown}" if old is not None else "/dev/null",
                f"b/{shown}" if new is not None else "/dev/null",
                lineterm="",
            )
            part = "\n".join(lines) + "\n"
            if part == "\n":  # touched, same text
                continue
        if length + len(part) > max_chars:
            parts.append(f"[... patch stopped at {max_chars} characters: more files changed ...]\n")
            break
        parts.append(part)
        length += len(part)
    return "".join(parts)


def _changed(before: Snapshot, after: dict[str, tuple[int, str]]) -> tuple[list[str], ...]:
    """Added, modified, deleted paths."""
    files = before.files
    return (
        sorted(after.keys() - files.keys()),
        sorted(p for p in after.keys() & files.keys() if after[p] != files[p]),
        sorted(files.keys() - after.keys()),
    )


def _text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
        return None if b"\0" in data else data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _scan(root: Path) -> set[str]:
    found: set[str] = set()
    for folder, dirs, names in walk(root):
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
        if not stat.S_ISREG(info.st_mode):  # reading a FIFO would wait for a writer
            return info.st_size, f"special file {stat.S_IFMT(info.st_mode):o}"
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
