"""Layer 1: interaction metrics over hand-computed command lists and real transcripts."""

from __future__ import annotations

import pytest

from core.matrix import Target
from core.metrics.interaction import MAX_SUBCOMMANDS, interaction_metrics, target_commands
from core.results.run import OTHER_SUBCOMMANDS, SubcommandStats
from core.results.transcript import CommandRecord, Transcript
from core.transcripts import parse_transcript
from tests.conftest import FIXTURES

FIXTURES = FIXTURES / "transcripts"
MY_TOOL = Target(command_pattern=r"my-tool\s+(\S+)")


def transcript_of(*runs: tuple[str, int | None], structured: bool = True) -> Transcript:
    return Transcript(
        format="events-jsonl",
        commands=[CommandRecord(command=command, exit_code=code) for command, code in runs],
        structured=structured,
        exit_codes_approximate=not structured,
    )


def test_hand_computed_session() -> None:
    transcript = transcript_of(
        ("my-tool create --title a", 2),  # fails
        ("my-tool create --title a", 0),  # retried, same command: succeeds
        ("my-tool  create  --title a", 0),  # same again after whitespace collapsing
        ("my-tool --help", 0),
        ("my-tool create --title 'a'", 0),  # a variant: a new unique command, first try ok
        ("my-tool list", None),  # unknown exit: not a failure
        ("my-tool list --json", 1),
        ("git status", 1),  # not the target tool
    )
    metrics = interaction_metrics(transcript, MY_TOOL, completed=True)
    # 7 target commands; unique: create a, --help, create 'a', list, list --json = 5
    assert metrics.total_commands == 7
    assert metrics.unique_commands == 5
    assert metrics.error_count == 2
    assert metrics.retry_count == 2
    assert metrics.help_invocations == 1
    assert metrics.error_rate == 2 / 7
    assert metrics.retry_rate == 2 / 7
    # first runs: create a (failed), --help, create 'a', list (unknown: ok), list --json (failed)
    assert metrics.first_try_success_rate == 3 / 7
    assert metrics.iteration_ratio == 5 / 7
    assert metrics.completed is True
    assert metrics.source == "events" and not metrics.exit_codes_approximate
    assert metrics.per_subcommand == {
        "create": SubcommandStats(total=4, errors=1, unique=2, help_invocations=0),
        "--help": SubcommandStats(total=1, errors=0, unique=1, help_invocations=1),
        "list": SubcommandStats(total=2, errors=1, unique=2, help_invocations=0),
    }


def test_empty_command_list_gives_zero_rates() -> None:
    metrics = interaction_metrics(transcript_of(), MY_TOOL, completed=False)
    assert metrics.total_commands == metrics.unique_commands == metrics.error_count == 0
    assert metrics.error_rate == metrics.retry_rate == 0.0
    assert metrics.first_try_success_rate == metrics.iteration_ratio == 0.0
    assert metrics.per_subcommand == {} and metrics.completed is False


def test_no_pattern_takes_every_command_and_no_group_means_no_subcommands() -> None:
    transcript = transcript_of(("ls", 0), ("my-tool x", 1), ("ls", 0))
    assert len(target_commands(transcript, Target())) == 3
    metrics = interaction_metrics(transcript, Target(), completed=True)
    assert (metrics.total_commands, metrics.unique_commands, metrics.error_count) == (3, 2, 1)
    assert metrics.first_try_success_rate == 1 / 3
    assert metrics.per_subcommand == {}
    no_group = interaction_metrics(transcript, Target(command_pattern="my-tool"), completed=True)
    assert no_group.total_commands == 1 and no_group.per_subcommand == {}


def test_optional_group_that_did_not_match_only_counts_in_totals() -> None:
    transcript = transcript_of(("my-tool", 0), ("my-tool show", 0))
    metrics = interaction_metrics(
        transcript, Target(command_pattern=r"my-tool(?:\s+(\S+))?"), completed=True
    )
    assert metrics.total_commands == 2
    assert list(metrics.per_subcommand) == ["show"]


def test_custom_help_pattern() -> None:
    transcript = transcript_of(("my-tool help create", 0), ("my-tool --help", 0))
    target = Target(command_pattern=r"my-tool\s+(\S+)", help_pattern=r"my-tool help\b")
    assert interaction_metrics(transcript, target, completed=True).help_invocations == 1


def test_plain_fallback_is_marked_approximate() -> None:
    output = (FIXTURES / "plain-session.txt").read_text()
    transcript = parse_transcript("plain", output, command_pattern=MY_TOOL.command_pattern)
    metrics = interaction_metrics(transcript, MY_TOOL, completed=True)
    assert metrics.source == "transcript" and metrics.exit_codes_approximate
    assert (metrics.total_commands, metrics.error_count, metrics.help_invocations) == (5, 2, 1)
    assert metrics.per_subcommand["link"] == SubcommandStats(total=2, errors=2, unique=2)


@pytest.mark.parametrize(
    ("fmt", "name", "total", "errors"),
    [
        ("opencode-json", "opencode-json-2.jsonl", 8, 2),
        ("claude-stream-json", "claude-stream-json-2.jsonl", 2, 0),
        ("codex-exec-json", "codex-exec-json-failed.jsonl", 4, 2),
    ],
)
def test_real_transcripts(fmt: str, name: str, total: int, errors: int) -> None:
    transcript = parse_transcript(fmt, (FIXTURES / name).read_text())
    metrics = interaction_metrics(transcript, Target(), completed=transcript.finished)
    assert (metrics.total_commands, metrics.error_count) == (total, errors)
    assert metrics.error_rate == errors / total


def test_per_subcommand_keeps_the_most_frequent_and_sums_the_rest() -> None:
    hot = MAX_SUBCOMMANDS - 1  # and cold0, which ran twice
    frequent = [(f"my-tool hot{i} --n {n}", 0) for i in range(hot) for n in range(3)]
    rare = [(f"my-tool cold{i}", 1 if i % 2 else 0) for i in range(1000)]
    transcript = transcript_of(*rare[:500], *frequent, *rare[500:], ("my-tool cold0 --help", 0))
    metrics = interaction_metrics(transcript, MY_TOOL, completed=True)
    assert len(metrics.per_subcommand) == MAX_SUBCOMMANDS + 1
    assert list(metrics.per_subcommand)[:2] == ["cold0", "hot0"]  # in the order first seen
    assert "cold1" not in metrics.per_subcommand
    assert metrics.per_subcommand["hot7"] == SubcommandStats(total=3, unique=3)
    assert metrics.per_subcommand[OTHER_SUBCOMMANDS] == SubcommandStats(
        total=999, errors=500, unique=999
    )
    assert metrics.subcommands_folded == 999
    assert metrics.per_subcommand["cold0"] == SubcommandStats(total=2, unique=2, help_invocations=1)
    assert metrics.total_commands == 1000 + 3 * hot + 1  # the totals: every one


def test_per_subcommand_within_its_bound_is_whole() -> None:
    runs = [(f"my-tool sub{i}", 0) for i in range(MAX_SUBCOMMANDS)]
    metrics = interaction_metrics(transcript_of(*runs), MY_TOOL, completed=True)
    assert len(metrics.per_subcommand) == MAX_SUBCOMMANDS and metrics.subcommands_folded == 0
    assert OTHER_SUBCOMMANDS not in metrics.per_subcommand
