"""The changes summary the judge reads: what the agent did to the prepared workspace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.files import changes as workspace_changes
from core.files.changes import snapshot, summarize_changes


def prepared(root: Path) -> Path:
    """A workspace as the run prepares it: template files, a tier file, setup output."""
    workspace = root / "ws"
    (workspace / "docs").mkdir(parents=True)
    (workspace / "README.md").write_text("hello")
    (workspace / "docs" / "keep.md").write_text("same")
    (workspace / "docs" / "old.md").write_text("bye")
    (workspace / "data.txt").write_text("abc")
    (workspace / "AGENTS.md").write_text("guidance")  # a tier file
    (workspace / "node_modules").mkdir()  # what a setup command left
    (workspace / "node_modules" / "dep.js").write_text("x")
    return workspace


def test_only_what_the_agent_did_is_reported(tmp_path: Path) -> None:
    workspace = prepared(tmp_path)
    before = snapshot(workspace)
    (workspace / "docs" / "old.md").unlink()
    (workspace / "data.txt").write_text("xyz")  # same size, other content
    (workspace / "README.md").write_text("hello world")
    (workspace / ".my-tool").mkdir()
    (workspace / ".my-tool" / "store.json").write_text("{}")
    (workspace / ".git" / "objects").mkdir(parents=True)
    (workspace / ".git" / "objects" / "ab").write_text("blob")
    (workspace / "link").symlink_to("/etc")

    assert summarize_changes(workspace, before).splitlines() == [
        "changes since the workspace was prepared: 2 added, 2 modified, 1 deleted",
        "  added: .my-tool/store.json (2 bytes)",
        f"  added: link ({len('/etc')} bytes)",
        "  modified: README.md (5 -> 11 bytes)",
        "  modified: data.txt (3 -> 3 bytes)",
        "  deleted: docs/old.md",
    ]


def test_a_workspace_the_agent_left_alone(tmp_path: Path) -> None:
    workspace = prepared(tmp_path)
    before = snapshot(workspace)
    (workspace / ".git").mkdir()
    (workspace / ".git" / "HEAD").write_text("ref")
    (workspace / "data.txt").write_text("abc")  # rewritten, the same
    assert summarize_changes(workspace, before) == "no changes since the workspace was prepared"


def test_large_files_are_compared_by_size_and_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workspace_changes, "HASH_LIMIT", 4)
    big = tmp_path / "big.bin"
    big.write_bytes(b"0123456789")
    before = snapshot(tmp_path)
    big.write_bytes(b"9876543210")
    os.utime(big, ns=(1, 1))  # another time
    assert "modified: big.bin (10 -> 10 bytes)" in summarize_changes(tmp_path, before)


def test_without_a_snapshot_every_file_is_listed(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("1234")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("")
    assert summarize_changes(tmp_path, None).splitlines() == [
        "2 files in the workspace (nothing to compare with)",
        "  a.txt (4 bytes)",
        "  sub/b.txt (0 bytes)",
    ]


def test_summary_is_bounded(tmp_path: Path) -> None:
    before = snapshot(tmp_path)
    for i in range(60):
        (tmp_path / f"f{i:02d}.txt").write_text("x")
    lines = summarize_changes(tmp_path, before, max_files=10).splitlines()
    assert lines[0] == "changes since the workspace was prepared: 60 added, 0 modified, 0 deleted"
    assert len(lines) == 12
    assert lines[-1] == "  ... and 50 more"


def test_the_patch_is_a_unified_diff_of_the_text_changes(tmp_path: Path) -> None:
    workspace = prepared(tmp_path)
    (workspace / "logo.bin").write_bytes(b"\0\1\2")
    before = snapshot(workspace)
    (workspace / "docs" / "old.md").unlink()
    (workspace / "README.md").write_text("hello\nworld\n")
    (workspace / "notes.md").write_text("first note\n")
    (workspace / "logo.bin").write_bytes(b"\0\1\3")
    (workspace / "docs" / "keep.md").write_text("same")  # rewritten, unchanged

    assert workspace_changes.patch(before, snapshot(workspace), max_chars=10_000) == (
        "--- a/README.md\n+++ b/README.md\n@@ -1 +1,2 @@\n hello\n+world\n"
        "--- a/docs/old.md\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
        "Binary or large file logo.bin changed\n"
        "--- /dev/null\n+++ b/notes.md\n@@ -0,0 +1 @@\n+first note\n"
    )
    stopped = workspace_changes.patch(before, snapshot(workspace), max_chars=80)
    assert stopped.startswith("--- a/README.md")
    assert stopped.endswith("[... patch stopped at 80 characters: more files changed ...]\n")
    assert workspace_changes.patch(None, snapshot(workspace), max_chars=80) == ""
