"""The `scheduler` group: every command listed, each imported only when it runs (and
`--help` importing click and little more), and a mistyped one answered with the nearest."""

from __future__ import annotations

import os
import subprocess
import sys

import click

from scheduler.cli import COMMANDS, main
from tests.conftest import ROOT, run_cli

# What a command that only prints must not import: Celery (and kombu), redis-py's asyncio
# client, the matrix's models and pydantic, the model server, the preflight, rich.
HEAVY = (
    "celery", "kombu", "redis", "redis.asyncio.client", "core.matrix", "pydantic",
    "pydantic.json_schema", "core.modelserver", "worker.preflight", "rich.console",
    "scheduler.fleet",
)  # fmt: skip


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


def test_each_command_s_summary_is_its_short_help_in_the_group_s_help_and_its_own() -> None:
    shown = run_cli("--help", env={**os.environ, "COLUMNS": "200"})
    listed = shown.stdout.split("Commands:", 1)[1].strip().splitlines()
    assert {line.split(None, 1)[0]: line.split(None, 1)[1] for line in listed} == {
        name: command.summary for name, command in COMMANDS.items()
    }
    for name, command in COMMANDS.items():
        loaded = main.get_command(click.Context(main), name)
        assert loaded is not None and loaded.get_short_help_str(200) == command.summary


def test_help_of_the_group_and_of_every_command_imports_click_and_no_more() -> None:
    """`--help` imports neither Celery, redis, pydantic, the matrix's models nor rich:
    the group's lists the commands from their summaries, each command imports what it
    needs as it runs. One process for all of them: none loads any if together none do."""
    probe = (
        "import json, sys; from scheduler.cli import main, COMMANDS\n"
        "for args in [['--help'], *([name, '--help'] for name in COMMANDS)]:\n"
        "    try: main.main(args, 'scheduler', standalone_mode=False)\n"
        "    except SystemExit: pass\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert "Usage: scheduler model-server" in done.stdout  # the probe ran to the end
    assert done.stdout.strip().splitlines()[-1] == "[]"
