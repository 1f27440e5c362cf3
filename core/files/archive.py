"""A run's workspace kept as a bounded, compressed tar (matrix `workspace_archive:`), so
that `scheduler rescore` can run the gates again on any worker without the agent.

Packing takes the secrets out of every file (the redactor's marker in their
place), keeps symlinks as links and never follows them, keeps file names as
their bytes whatever they are (a PAX archive's binary names) and leaves special
files (FIFOs, sockets, devices) out; unpacking uses tarfile's
"data" filter: nothing lands outside the destination, no device files, no
absolute or escaping links.
"""

from __future__ import annotations

import base64
import io
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from pydantic import Field

from core.errors import WorkspaceTooLarge
from core.evidence.redact import MARKER, redact_record
from core.files.tree import walk
from core.results.record import Record
from core.results.transcript import CommandRecord


class ArchivedWorkspace(Record):
    """One run's workspace as its gates found it, and what the transcript gates read."""

    tar_gz: str = Field(description="base64 of the workspace's tar.gz")
    size_bytes: int = Field(description="the compressed size")
    target_commands: list[CommandRecord] = Field(default_factory=list)


def pack(
    workspace: Path,
    max_bytes: int,
    commands: Sequence[CommandRecord],
    secrets: Sequence[str] = (),
) -> ArchivedWorkspace:
    """The workspace with the secrets taken out of its files and of `commands`. Raises
    WorkspaceTooLarge past `max_bytes` (compressed)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as tar:
        for path in _entries(workspace):
            info = tar.gettarinfo(path, arcname=str(path.relative_to(workspace)))
            # A socket (no tar entry) or a FIFO or device (which unpack's filter
            # refuses) is no file a gate reads.
            if info is None or not (info.isfile() or info.isdir() or info.issym() or info.islnk()):
                continue
            if not info.isfile():
                tar.addfile(info)  # folders, symlinks (kept as links)
                continue
            content = path.read_bytes()
            for secret in secrets:
                if secret:
                    content = content.replace(secret.encode(), MARKER.encode())
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    data = buffer.getvalue()
    if len(data) > max_bytes:
        raise WorkspaceTooLarge(
            f"workspace not archived: {len(data)} bytes compressed, above "
            f"workspace_archive.max_bytes ({max_bytes})"
        )
    return ArchivedWorkspace(
        tar_gz=base64.b64encode(data).decode(),
        size_bytes=len(data),
        target_commands=[redact_record(c, secrets) for c in commands],
    )


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
