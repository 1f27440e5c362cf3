"""A run's workspace archived for rescore: restored as it was, bounded, secrets out,
and nothing unpacked outside its destination."""

from __future__ import annotations

import base64
import io
import os
import tarfile
from pathlib import Path

import pytest

from core.errors import WorkspaceTooLarge
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
