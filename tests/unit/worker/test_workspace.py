"""A delivery's folder where the work folder lives: on ext4, the run folders spread out."""

from __future__ import annotations

import array
import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from core.matrix import Scenario, Tier
from worker.workspace import prepare, spread_out

# linux/fs.h, read here independently of the code under test.
FS_IOC_GETFLAGS = 0x80086601
FS_TOPDIR_FL = 0x00020000


def _flags(folder: Path) -> int:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        got = array.array("i", [0])
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, got)
        return got[0]
    finally:
        os.close(fd)


def _ext(folder: Path) -> bool:
    """Whether `folder` is on ext2/3/4, by coreutils' stat (statvfs has no type)."""
    kind = subprocess.run(["stat", "-f", "-c", "%T", folder], capture_output=True, text=True)
    return kind.stdout.startswith("ext")


@pytest.mark.parametrize("place", ["tmp", "shm"])
def test_the_work_folder_is_marked_as_the_top_of_unrelated_trees_where_it_can_be(
    place: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if place == "shm":  # tmpfs: no inode flags, and a run is prepared all the same
        shm = Path("/dev/shm")
        assert shm.is_dir(), "this machine has no /dev/shm"
        base = Path(os.path.realpath(shm)) / f"evalfleet-test-{os.getpid()}-{tmp_path.name}"
    else:
        base = tmp_path / "runs"
    monkeypatch.setenv("EVALFLEET_WORKDIR", str(base))
    try:
        run_dir = prepare("exp:T0:s0:0", Tier(id="T0"), Scenario(id="s0", prompt="go"), "go")
        assert run_dir.prompt_file.read_text() == "go" and run_dir.workspace.is_dir()
        if _ext(base):
            assert _flags(base) & FS_TOPDIR_FL, f"{base} was not marked"
        else:  # tmpfs keeps no such flag: nothing to mark, nothing refused
            assert spread_out(str(base)) is False
        run_dir.remove()
        run_dir.release()
        assert not run_dir.root.exists()
    finally:
        if place == "shm":
            shutil.rmtree(base, ignore_errors=True)


def test_a_folder_that_is_not_there_is_left_unmarked(tmp_path: Path) -> None:
    assert spread_out(str(tmp_path / "absent")) is False
