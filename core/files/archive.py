"""A run's workspace kept as a bounded, compressed tar (matrix `workspace_archive:`), so
that `scheduler rescore` can run the gates again on any worker without the agent.

Packing takes the secrets out of every file (the redactor's marker in their
place), keeps symlinks as links and never follows them, keeps file names as
their bytes whatever they are (a PAX archive's binary names) and leaves special
files (FIFOs, sockets, devices) out. It never holds a file whole: a workspace
whose files are larger than gzip could bring under `max_bytes` (MAX_RATIO times
it) is refused before a byte is read (a sparse file of gigabytes uses no disk,
so the workspace's limit lets it by), and the rest is read a chunk at a time,
stopping as soon as the archive is past `max_bytes`. Unpacking uses tarfile's
"data" filter: nothing lands outside the destination, no device files, no
absolute or escaping links.
"""

from __future__ import annotations

import base64
import io
import re
import tarfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from pydantic import Field

from core.errors import WorkspaceTooLarge
from core.evidence.redact import MARKER, redact_record
from core.files.tree import walk
from core.results.record import Record
from core.results.transcript import CommandRecord

# Deflate's best: about 1,032 bytes in for a byte out (a run of one byte), so files
# larger than this many times max_bytes can never be archived within it.
MAX_RATIO = 1032
_CHUNK = 64 * 1024  # tarfile copies 16 KiB at a time


class ArchivedWorkspace(Record):
    """One run's workspace as its gates found it, and what the transcript gates read."""

    tar_gz: str = Field(description="base64 of the workspace's tar.gz")
    size_bytes: int = Field(description="the compressed size")
    target_commands: list[CommandRecord] = Field(default_factory=list)


# A file this large whose disk blocks hold under an eighth of it is mostly holes.
SPARSE_MIN_BYTES = 1 << 20


def pack(
    workspace: Path,
    max_bytes: int,
    commands: Sequence[CommandRecord],
    secrets: Sequence[str] = (),
) -> ArchivedWorkspace:
    """The workspace with the secrets taken out of its files and of `commands`. Raises
    WorkspaceTooLarge past `max_bytes` (compressed), reading no more than it must."""
    entries = list(_entries(workspace))
    files = [(p, p.lstat()) for p in entries if p.is_file() and not p.is_symlink()]
    for path, found in files:
        # Holes cost no disk and gzip to nothing, but are read and compressed byte by
        # byte: a sparse file of gigabytes an agent left would cost the worker minutes.
        if found.st_size > SPARSE_MIN_BYTES and found.st_blocks * 512 < found.st_size // 8:
            raise WorkspaceTooLarge(
                f"workspace not archived: {path.relative_to(workspace)} is a sparse file of "
                f"{found.st_size} bytes, {found.st_blocks * 512} of them on disk"
            )
    sizes = sum(found.st_size for _, found in files)
    if sizes > max_bytes * MAX_RATIO:
        raise WorkspaceTooLarge(
            f"workspace not archived: its files are {sizes} bytes, more than gzip brings "
            f"under workspace_archive.max_bytes ({max_bytes})"
        )
    buffer = io.BytesIO()
    redactor = _Redactor(secrets)
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as tar:
        for path in entries:
            info = tar.gettarinfo(path, arcname=str(path.relative_to(workspace)))
            # A socket (no tar entry) or a FIFO or device (which unpack's filter
            # refuses) is no file a gate reads.
            if info is None or not (info.isfile() or info.isdir() or info.issym() or info.islnk()):
                continue
            if not info.isfile():
                tar.addfile(info)  # folders, symlinks (kept as links)
                continue
            # Its size once redacted first, then its bytes: a file's header comes first.
            info.size = sum(map(len, redactor.chunks(path)))
            tar.addfile(info, _Stream(redactor.chunks(path), lambda: _over(buffer, max_bytes)))
            _over(buffer, max_bytes)
    data = buffer.getvalue()
    _over(buffer, max_bytes)
    return ArchivedWorkspace(
        tar_gz=base64.b64encode(data).decode(),
        size_bytes=len(data),
        target_commands=[redact_record(c, secrets) for c in commands],
    )


def _over(buffer: io.BytesIO, max_bytes: int) -> None:
    if buffer.tell() > max_bytes:
        raise WorkspaceTooLarge(
            f"workspace not archived: above workspace_archive.max_bytes ({max_bytes}) "
            f"compressed, at {buffer.tell()} bytes"
        )


class _Redactor:
    """A file's bytes a chunk at a time with the secrets taken out, a secret that
    spans two chunks included: each chunk's last bytes wait for the next."""

    def __init__(self, secrets: Sequence[str]):
        values = sorted({s.encode() for s in secrets if s}, key=len, reverse=True)
        self.pattern = re.compile(b"|".join(map(re.escape, values))) if values else None
        self.keep = max(map(len, values), default=1) - 1

    def chunks(self, path: Path) -> Iterator[bytes]:
        with path.open("rb") as file:
            pending = b""
            while chunk := file.read(_CHUNK):
                pending += chunk
                if self.pattern is None:
                    yield pending
                    pending = b""
                    continue
                done, pending = self._split(pending)
                yield done
            yield self._redacted(pending)

    def _split(self, data: bytes) -> tuple[bytes, bytes]:
        """What of `data` is done (redacted) and what waits: a match may still grow
        into the next chunk only from within its last `keep` bytes."""
        assert self.pattern is not None
        cut = max(len(data) - self.keep, 0)
        for match in self.pattern.finditer(data):
            if match.start() >= cut:
                break
            cut = max(cut, match.end())
        return self._redacted(data[:cut]), data[cut:]

    def _redacted(self, data: bytes) -> bytes:
        return data if self.pattern is None else self.pattern.sub(MARKER.encode(), data)


class _Stream(io.RawIOBase):
    """Chunks read as a file (what tarfile copies from), `check`ed before each."""

    def __init__(self, chunks: Iterator[bytes], check: Callable[[], None]):
        self.chunks, self.check = chunks, check
        self.parts: list[bytes] = []
        self.ready = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        # All of `size` while there is more: tarfile takes a short read for the end.
        while size < 0 or self.ready < size:
            self.check()
            chunk = next(self.chunks, None)
            if chunk is None:
                break
            self.parts.append(chunk)
            self.ready += len(chunk)
        data = b"".join(self.parts)
        size = len(data) if size < 0 else size
        rest = data[size:]
        self.parts, self.ready = ([rest] if rest else []), len(rest)
        return data[:size]


def _entries(workspace: Path) -> Iterator[Path]:
    """Every folder, file and link under `workspace`, never following a link."""
    for folder, dirs, files in walk(workspace):
        base = Path(folder)
        for name in sorted(dirs) + sorted(files):
            yield base / name


def unpack(archive: ArchivedWorkspace, destination: Path) -> None:
    """The workspace restored into `destination` (created)."""
    destination.mkdir(parents=True, exist_ok=True)
    data = base64.b64decode(archive.tar_gz)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(destination, filter="data")
