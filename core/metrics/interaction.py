"""Layer 1 of llm-tool-test's evaluation: interaction metrics over the target tool's commands.

Definitions (llm-tool-test's table, made precise):
- Target commands: the transcript's commands whose text matches
  `target.command_pattern` (re.search); every command when there is no pattern.
- Two commands are "the same" when their text is equal after collapsing whitespace.
- Failed: a known, non-zero exit code. An unknown exit code (None) is NOT a failure:
  the metrics never invent errors the transcript does not show.
- error_rate = failed / total.
- retry_count = total - unique and retry_rate = retry_count / total, as llm-tool-test's
  formula says: every repetition of a command counts, whether or not it followed
  a failure (a repeat after success is still a wasted command).
- help_invocations: target commands matching `target.help_pattern`.
- first_try_success_rate = (unique commands whose FIRST execution did not fail) /
  total commands, llm-tool-test's "succeeded on first attempt / total commands": so
  repetition lowers it as well as failure.
- iteration_ratio = unique / total.
- completed: given by the caller (the agent exited by itself with code 0).
Empty command lists give 0 for every rate, as the model's numbers; a report leaves
such runs out of the rates' means (core.metrics.catalog) and the layered composite
leaves the layer out (core.metrics.formulas). With a capture group in the pattern,
`per_subcommand` tallies commands by group 1 (commands where the group did not
participate are only in the totals), bounded as every per-run table is: the
MAX_SUBCOMMANDS most frequent (by total, ties by name) keep a row each, the rest
are summed in one row, OTHER_SUBCOMMANDS, and `subcommands_folded` says how many
they were (an agent that ran 200,000 distinct subcommands made each of its runs
megabytes in every listing).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from core.matrix import Target
from core.results.run import OTHER_SUBCOMMANDS, InteractionMetrics, SubcommandStats
from core.results.transcript import CommandRecord, Transcript


def target_commands(transcript: Transcript, target: Target) -> list[CommandRecord]:
    if target.command_pattern is None:
        return list(transcript.commands)
    pattern = re.compile(target.command_pattern)
    return [command for command in transcript.commands if pattern.search(command.command)]


def interaction_metrics(
    transcript: Transcript, target: Target, completed: bool
) -> InteractionMetrics:
    commands = target_commands(transcript, target)
    help_pattern = re.compile(target.help_pattern)
    totals = _tally(commands, help_pattern)
    per_subcommand = _per_subcommand(commands, target.command_pattern, help_pattern)
    kept, folded = _bounded(per_subcommand)
    return InteractionMetrics(
        total_commands=totals.total,
        unique_commands=totals.unique,
        error_count=totals.errors,
        retry_count=totals.total - totals.unique,
        help_invocations=totals.help_invocations,
        error_rate=_ratio(totals.errors, totals.total),
        retry_rate=_ratio(totals.total - totals.unique, totals.total),
        first_try_success_rate=_ratio(_first_try_successes(commands), totals.total),
        iteration_ratio=_ratio(totals.unique, totals.total),
        completed=completed,
        source="events" if transcript.structured else "transcript",
        exit_codes_approximate=transcript.exit_codes_approximate,
        per_subcommand=kept,
        subcommands_folded=folded,
    )


def failed(command: CommandRecord) -> bool:
    return command.exit_code is not None and command.exit_code != 0


def _same_key(command: CommandRecord) -> str:
    return " ".join(command.command.split())


def _tally(commands: list[CommandRecord], help_pattern: re.Pattern[str]) -> SubcommandStats:
    return SubcommandStats(
        total=len(commands),
        errors=sum(map(failed, commands)),
        unique=len({_same_key(command) for command in commands}),
        help_invocations=sum(1 for command in commands if help_pattern.search(command.command)),
    )


def _first_try_successes(commands: Iterable[CommandRecord]) -> int:
    first_runs: dict[str, CommandRecord] = {}
    for command in commands:
        first_runs.setdefault(_same_key(command), command)
    return sum(not failed(command) for command in first_runs.values())


def _per_subcommand(
    commands: list[CommandRecord], command_pattern: str | None, help_pattern: re.Pattern[str]
) -> dict[str, SubcommandStats]:
    pattern = re.compile(command_pattern) if command_pattern else None
    if pattern is None or pattern.groups == 0:
        return {}
    groups: dict[str, list[CommandRecord]] = {}
    for command in commands:
        match = pattern.search(command.command)
        if match and match.group(1) is not None:
            groups.setdefault(match.group(1), []).append(command)
    return {name: _tally(members, help_pattern) for name, members in groups.items()}


# A run's subcommands kept a row each; an agent's tool has tens, a hostile one 100,000s.
MAX_SUBCOMMANDS = 50


def _bounded(table: dict[str, SubcommandStats]) -> tuple[dict[str, SubcommandStats], int]:
    """The MAX_SUBCOMMANDS most frequent rows, in the order first seen, the rest summed
    under OTHER_SUBCOMMANDS; and how many rows that row sums."""
    if len(table) <= MAX_SUBCOMMANDS:
        return table, 0
    top = set(sorted(table, key=lambda name: (-table[name].total, name))[:MAX_SUBCOMMANDS])
    kept = {name: stats for name, stats in table.items() if name in top}
    rest = [stats for name, stats in table.items() if name not in top]
    kept[OTHER_SUBCOMMANDS] = SubcommandStats(
        total=sum(s.total for s in rest),
        errors=sum(s.errors for s in rest),
        unique=sum(s.unique for s in rest),  # distinct groups share no command
        help_invocations=sum(s.help_invocations for s in rest),
    )
    return kept, len(rest)


def _ratio(part: int, whole: int) -> float:
    return part / whole if whole else 0.0
