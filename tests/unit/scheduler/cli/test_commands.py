"""The `scheduler` group: every command listed, each imported only when it runs, and a
mistyped one answered with the nearest."""

from __future__ import annotations

import os
import subprocess
import sys

from scheduler.cli import COMMANDS
from tests.conftest import ROOT, run_cli


def test_help_lists_every_command() -> None:
    shown = run_cli("--help", env=dict(os.environ))
    assert shown.returncode == 0
    listed = shown.stdout.split("Commands:", 1)[1]
    assert {line.split()[0] for line in listed.strip().splitlines()} == set(COMMANDS)


def test_a_mistyped_command_gets_the_nearest_and_exit_2() -> None:
    typo = run_cli("stauts", env=dict(os.environ))
    assert typo.returncode == 2
    assert "No such command 'stauts'; did you mean `status`?" in typo.stderr
    unknown = run_cli("xyzzy", env=dict(os.environ))
    assert unknown.returncode == 2 and "No such command 'xyzzy'." in unknown.stderr


def test_a_reading_command_imports_neither_celery_nor_the_other_commands() -> None:
    probe = (
        "import sys; from scheduler.cli import main; "
        "main.main(['status', '--help'], standalone_mode=False); "
        "print(sorted(m for m in ('celery', 'scheduler.cli.running', "
        "'scheduler.cli.preflight', 'core.modelserver') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"
