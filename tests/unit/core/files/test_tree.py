"""core.files.tree.walk: os.walk's answers, however deep the tree."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

from core.files.tree import walk
from tests.support.trees import nest


def test_it_answers_as_os_walk_does_links_and_pruning_included(tmp_path: Path) -> None:
    for folder in ("a/b/c", "a/skip/deep", "e", ".git/objects"):
        (tmp_path / folder).mkdir(parents=True)
    for name in ("top.txt", "a/one", "a/b/two", "a/skip/deep/three", "e/four"):
        (tmp_path / name).write_text(name)
    (tmp_path / "a" / "to-e").symlink_to(tmp_path / "e")  # a link to a folder: listed, not entered
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")

    def walked(walker: object) -> list[tuple[str, list[str], list[str]]]:
        seen = []
        for folder, dirs, names in walker(tmp_path):  # type: ignore[operator]
            dirs[:] = sorted(d for d in dirs if d != "skip")
            seen.append((os.path.relpath(folder, tmp_path), dirs[:], sorted(names)))
        return seen

    ours = walked(walk)
    assert ours == walked(os.walk)
    assert ("a", ["b", "to-e"], ["one"]) in ours and all("skip" not in f for f, _, _ in ours)


def test_a_tree_deeper_than_the_recursion_limit_is_walked_whole(tmp_path: Path) -> None:
    nest(tmp_path)
    try:
        # Down to where a folder's path passes the system's limit (PATH_MAX), as os.walk
        # would, were it not stopped a third of the way by Python's recursion limit.
        errors: list[OSError] = []
        walked = [folder for folder, _, _ in walk(tmp_path, onerror=errors.append)]
        most = os.pathconf("/", "PC_PATH_MAX")
        fits = [k for k in range(3001) if len(str(tmp_path)) + 2 * k < most]
        assert len(walked) == len(fits) > sys.getrecursionlimit()
        assert {e.errno for e in errors} == {errno.ENAMETOOLONG}
    finally:  # pytest's own cleanup could not delete the tree
        subprocess.run(["rm", "-rf", str(tmp_path / "d")], check=False)


def test_an_unreadable_folder_goes_to_onerror(tmp_path: Path) -> None:
    errors: list[OSError] = []
    assert list(walk(tmp_path / "absent", onerror=errors.append)) == []
    assert len(errors) == 1 and isinstance(errors[0], FileNotFoundError)
