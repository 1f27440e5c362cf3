"""A machine's block of run uids (worker.confinement): drawn once per /run, kept, and
drawn anew by a machine of its own (a container), so containers of one host lease
uids apart."""

from __future__ import annotations

from pathlib import Path

import pytest

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
        assert first + confinement.UID_SLOTS - 1 < 2**32 - 1
        bases.append(first)
    # One chance in UID_BLOCKS (600,000) that two machines draw the same block.
    assert bases[0] != bases[1]
