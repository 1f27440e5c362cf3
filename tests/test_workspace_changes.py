"""The changes summary the judge reads."""

from __future__ import annotations

import shutil
from pathlib import Path

from core.workspace_changes import summarize_changes


def make_template(root: Path) -> Path:
    template = root / "template"
    (template / "docs").mkdir(parents=True)
    (template / "README.md").write_text("hello")
    (template / "docs" / "keep.md").write_text("same")
    (template / "docs" / "old.md").write_text("bye")
    (template / "data.txt").write_text("abc")
    return template


def test_added_modified_deleted(tmp_path: Path) -> None:
    template = make_template(tmp_path)
    workspace = tmp_path / "ws"
    shutil.copytree(template, workspace)
    (workspace / "docs" / "old.md").unlink()
    (workspace / "data.txt").write_text("xyz")  # same size, other content
    (workspace / "README.md").write_text("hello world")
    (workspace / ".my-tool").mkdir()
    (workspace / ".my-tool" / "store.json").write_text("{}")
    (workspace / ".git" / "objects").mkdir(parents=True)
    (workspace / ".git" / "objects" / "ab").write_text("blob")
    (workspace / "link").symlink_to("/etc")

    summary = summarize_changes(workspace, template)

    assert summary.splitlines() == [
        "changes relative to the template: 2 added, 2 modified, 1 deleted",
        "  added: .my-tool/store.json (2 bytes)",
        f"  added: link ({len('/etc')} bytes)",
        "  modified: README.md (5 -> 11 bytes)",
        "  modified: data.txt (3 -> 3 bytes)",
        "  deleted: docs/old.md",
    ]


def test_unchanged_workspace(tmp_path: Path) -> None:
    template = make_template(tmp_path)
    workspace = tmp_path / "ws"
    shutil.copytree(template, workspace)
    (workspace / ".git").mkdir()
    (workspace / ".git" / "HEAD").write_text("ref")
    assert summarize_changes(workspace, template) == "no changes relative to the template"


def test_without_template_every_file_is_listed(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("1234")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("")
    assert summarize_changes(tmp_path, None).splitlines() == [
        "2 files in the workspace (no template to compare with)",
        "  a.txt (4 bytes)",
        "  sub/b.txt (0 bytes)",
    ]
    missing = summarize_changes(tmp_path, tmp_path / "nope")
    assert "template folder" in missing.splitlines()[0] and "not found" in missing


def test_summary_is_bounded(tmp_path: Path) -> None:
    template = tmp_path / "template"
    template.mkdir()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for i in range(60):
        (workspace / f"f{i:02d}.txt").write_text("x")
    lines = summarize_changes(workspace, template, max_files=10).splitlines()
    assert lines[0] == "changes relative to the template: 60 added, 0 modified, 0 deleted"
    assert len(lines) == 12
    assert lines[-1] == "  ... and 50 more"
