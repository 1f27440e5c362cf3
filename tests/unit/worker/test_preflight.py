"""worker.preflight.refuses_flags: a preset's CLI that refused its command line, told
apart from one that ran and failed. The refusals are what the pinned CLIs
(.ci/agent-clis.json) print, captured by running each with a flag it lacks."""

from __future__ import annotations

import pytest

from core.results.transcript import AgentOutcome
from worker.preflight import refuses_flags

CODEX = """\
WARNING: proceeding, even though we could not create PATH aliases: Refusing to create \
helper binaries under temporary dir "/tmp"
error: unexpected argument '--full-auto' found

  tip: to pass '--full-auto' as a value, use '-- --full-auto'

Usage: codex exec [OPTIONS] [PROMPT]
       codex exec [OPTIONS] <COMMAND> [ARGS]

For more information, try '--help'.
"""
CLAUDE_UNKNOWN = "error: unknown option '--bogus-flag'\n"
CLAUDE_ROOT = (
    "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons\n"
)
GEMINI_UNKNOWN = """\
Unknown arguments: bogus-flag, bogusFlag
Usage: gemini [options] [command]

Gemini CLI - Defaults to interactive mode. Use -p/--prompt for non-interactive (headless) mode.
"""
GEMINI_VALUE = """\
Invalid values:
  Argument: approval-mode, Given: "bogus", Choices: "default", "auto_edit", "yolo", "plan"
Usage: gemini [options] [command]
"""
# OpenCode 1.18 prints its usage alone, no word of which flag.
OPENCODE = """\
opencode run [message..]

run opencode with a message

Positionals:
  message  message to send                                                     [array]
"""


def outcome(stderr: str, exit_code: int | None = 1, stdout: str = "", **kw: bool) -> AgentOutcome:
    return AgentOutcome(
        exit_code=exit_code, stdout=stdout, stderr=stderr, started_at=0.0, ended_at=1.0, **kw
    )


@pytest.mark.parametrize(
    ("cli", "stderr", "exit_code"),
    [
        ("codex", CODEX, 2),
        ("claude", CLAUDE_UNKNOWN, 1),
        ("claude", CLAUDE_ROOT, 1),
        ("gemini", GEMINI_UNKNOWN, 1),
        ("gemini", GEMINI_VALUE, 1),
        ("opencode", OPENCODE, 1),
    ],
)
def test_each_real_clis_refusal_of_its_command_line(cli: str, stderr: str, exit_code: int) -> None:
    assert refuses_flags(cli, outcome(stderr, exit_code))


@pytest.mark.parametrize(
    "ran",
    [
        outcome("Error: connect ECONNREFUSED 127.0.0.1:9\n"),  # ran, then failed
        outcome(CODEX, exit_code=0),  # exited 0: it ran
        outcome(CODEX, exit_code=None, timed_out=True),
        # Its stream started: the CLI took its flags (a tool's usage text on stderr).
        outcome("Usage: grep [OPTION]... PATTERNS [FILE]...\n", stdout='{"type":"init"}\n'),
        outcome("opencode: session failed\n"),  # the CLI's name, but no synopsis
    ],
)
def test_a_cli_that_ran_and_failed_did_not_refuse_its_flags(ran: AgentOutcome) -> None:
    assert not refuses_flags("opencode", ran)
