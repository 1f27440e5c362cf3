"""A run's workspace archived for rescore: restored as it was, bounded, secrets out,
and nothing unpacked outside its destination."""

from __future__ import annotations

import base64
import io
import os
import tarfile
import time
import tracemalloc
from pathlib import Path

import pytest

from core.errors import WorkspaceTooLarge
from core.files.archive import _CHUNK as CHUNK
from core.files.archive import ArchivedWorkspace, pack, unpack
from core.results.transcript import CommandRecord

SECRET = "sk-secret-0123456789"


def test_a_workspace_comes_back_as_it_was_without_its_secrets(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "notes").mkdir(parents=True)
    (ws / "notes" / "a.md").write_text(f"token {SECRET}\n")
    (ws / "data.bin").write_bytes(bytes(range(256)))
    os.symlink("notes/a.md", ws / "link")
    commands = [CommandRecord(command=f"my-tool login {SECRET}", exit_code=0)]
    archive = pack(ws, 100_000, commands, [SECRET])
    assert SECRET not in archive.model_dump_json()
    assert archive.target_commands[0].command == "my-tool login [REDACTED]"

    out = tmp_path / "out"
    unpack(archive, out)
    assert (out / "notes" / "a.md").read_text() == "token [REDACTED]\n"
    assert (out / "data.bin").read_bytes() == bytes(range(256))
    assert os.readlink(out / "link") == "notes/a.md"  # a link, not a copy


def test_a_workspace_above_the_cap_is_not_kept(tmp_path: Path) -> None:
    (tmp_path / "big.bin").write_bytes(os.urandom(50_000))
    with pytest.raises(WorkspaceTooLarge, match=r"above workspace_archive\.max_bytes"):
        pack(tmp_path, 10_000, [])


def test_an_archive_cannot_write_outside_its_destination(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        evil = tarfile.TarInfo("../escaped.txt")
        tar.addfile(evil, io.BytesIO(b""))
    data = buffer.getvalue()
    archive = ArchivedWorkspace(tar_gz=base64.b64encode(data).decode(), size_bytes=len(data))
    with pytest.raises(tarfile.OutsideDestinationError):
        unpack(archive, tmp_path / "out")
    assert not (tmp_path / "escaped.txt").exists()


def test_files_too_large_to_ever_fit_are_refused_before_a_byte_is_read(tmp_path: Path) -> None:
    """Files larger than gzip could ever bring under max_bytes are not read at all."""
    (tmp_path / "big.bin").write_bytes(os.urandom(2_000_000))
    with pytest.raises(WorkspaceTooLarge, match=r"its files are 2000000 bytes, more than"):
        pack(tmp_path, 1000, [])


def test_a_sparse_file_is_refused_before_a_byte_is_read(tmp_path: Path) -> None:
    """A sparse file of gigabytes uses no disk, so the workspace's limit lets it by, and
    gzips to nothing: reading it whole (as pack once did) took the worker's memory,
    reading it in chunks its CPU for minutes. Its holes are no work a gate read."""
    with (tmp_path / "sparse.bin").open("wb") as sparse:
        sparse.truncate(8 * 2**30)
    started = time.monotonic()
    with pytest.raises(WorkspaceTooLarge, match=r"sparse.bin is a sparse file of 8589934592"):
        pack(tmp_path, 50_000_000, [])
    assert time.monotonic() - started < 5


def test_a_large_file_is_archived_a_chunk_at_a_time(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with (ws / "zeros.bin").open("wb") as zeros:
        for _ in range(64):  # written, not sparse: 64 MiB that compress to little
            zeros.write(bytes(2**20))
    tracemalloc.start()
    try:
        archive = pack(ws, 1_000_000, [])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, peak  # not the file's 64 MiB
    unpack(archive, tmp_path / "out")
    assert (tmp_path / "out" / "zeros.bin").stat().st_size == 64 * 2**20
    # Past max_bytes it stops as soon as the archive is: long before the file's end.
    (ws / "noise.bin").write_bytes(os.urandom(200_000))
    with pytest.raises(WorkspaceTooLarge, match=r"above workspace_archive\.max_bytes"):
        pack(ws, 100_000, [])


@pytest.mark.parametrize("at", [CHUNK - len(SECRET) + 1, CHUNK - 1, CHUNK, 3 * CHUNK - 5])
def test_a_secret_across_two_chunks_is_taken_out(tmp_path: Path, at: int) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    content = b"x" * at + SECRET.encode() + b"y" * 10 + SECRET.encode()
    (ws / "big.txt").write_bytes(content)
    archive = pack(ws, 10_000_000, [], [SECRET, "sk-secret"])
    unpack(archive, tmp_path / "out")
    kept = (tmp_path / "out" / "big.txt").read_bytes()
    assert kept == b"x" * at + b"[REDACTED]" + b"y" * 10 + b"[REDACTED]"
