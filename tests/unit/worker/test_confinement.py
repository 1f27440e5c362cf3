"""A machine's block of run uids (worker.confinement): drawn once per /run, kept, and
drawn anew by a machine of its own (a container), so containers of one host lease
uids apart."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from core.evaluation.credentials import RunAs
from worker import confinement


def test_a_machine_draws_its_block_once_and_another_machine_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    machines = [tmp_path / "host", tmp_path / "container"]
    for run in machines:
        run.mkdir()
    bases = []
    for run in machines:
        monkeypatch.setattr(confinement, "users_root", lambda run=run: run)
        first = confinement._uid_base()
        assert confinement._uid_base() == first == int((run / "uid-base").read_text())
        assert list(run.iterdir()) == [run / "uid-base"]  # its draft is gone
        assert (first - confinement.UID_BASE) % confinement.UID_SLOTS == 0
        assert first + confinement.UID_SLOTS - 1 < 2**31
        bases.append(first)
    # One chance in UID_BLOCKS (158,076) that two machines draw the same block.
    assert bases[0] != bases[1]


def test_a_block_drawn_above_what_bubblewrap_takes_is_drawn_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(confinement, "users_root", lambda: tmp_path)
    (tmp_path / "uid-base").write_text("3946020608")  # what an older evalfleet drew
    base = confinement._uid_base()
    assert confinement.UID_BASE <= base < 2**31 - confinement.UID_SLOTS
    assert int((tmp_path / "uid-base").read_text()) == base


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("bwrap"), reason="needs root and bwrap")
def test_the_last_uid_of_the_last_block_runs_bubblewrap() -> None:
    last = confinement.UID_BASE + confinement.UID_BLOCKS * confinement.UID_SLOTS - 1
    with RunAs(last, last).this_thread():
        done = subprocess.run(
            ["bwrap", "--ro-bind", "/", "/", "true"], capture_output=True, text=True
        )
    assert done.returncode == 0, done.stderr
