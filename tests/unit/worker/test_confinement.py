"""A machine's block of run uids (worker.confinement): drawn once per /run, kept, and
drawn anew by a machine of its own (a container), so containers of one host lease
uids apart."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from core.evaluation.credentials import SUPPORTED, RunAs
from tests.support.users import gone, pids_of
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


def _own_block() -> int:
    """A block of run uids no worker of this machine leases."""
    taken = confinement.users_root() / "uid-base"
    machines = int(taken.read_text()) if taken.exists() else None
    last = confinement.UID_BASE + (confinement.UID_BLOCKS - 1) * confinement.UID_SLOTS
    return last if last != machines else last - confinement.UID_SLOTS


# A delivery that dies holding its slot: it leaves a process of the user running and
# a file in /tmp, and never reaches the end of its lease.
_DIES = r"""
import os, subprocess, sys
from pathlib import Path
from worker import confinement
confinement.users_root = lambda: Path(sys.argv[1])
with confinement.slot_user() as user:
    with user.this_thread():
        subprocess.Popen(["sleep", "300"], start_new_session=True, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
        Path(sys.argv[2]).write_text("left")
    os._exit(9)
"""


@pytest.mark.skipif(os.geteuid() != 0 or not SUPPORTED, reason="run users need a root worker")
def test_a_slot_is_ended_with_its_delivery_and_after_one_that_died_holding_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    users = tmp_path / "users"
    users.mkdir(mode=0o700)
    base = _own_block()
    (users / "uid-base").write_text(str(base))
    monkeypatch.setattr(confinement, "users_root", lambda: users)
    mark = Path(f"/tmp/slot-{uuid.uuid4().hex[:12]}")
    died = subprocess.run(
        [sys.executable, "-c", _DIES, str(users), str(mark)],
        cwd=Path(__file__).parents[3],
        capture_output=True,
        text=True,
    )
    assert died.returncode == 9, died.stderr
    try:
        assert mark.read_text() == "left" and pids_of(base)  # what it left
        with confinement.slot_user() as user:
            assert user.uid == base  # the same slot, leased anew
            assert not mark.exists() and gone(base, timeout=5)
            with user.this_thread():
                mark.write_text("this delivery's")
                subprocess.Popen(["sleep", "300"], start_new_session=True)
        assert not mark.exists() and gone(base, timeout=5)
        assert (users / "0.lock").read_bytes() == b"ended"
    finally:
        RunAs(base, base).kill_all()
        mark.unlink(missing_ok=True)
