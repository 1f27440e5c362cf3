"""ProjectScylla's process metrics: how the agent got there, read from its commands.

A scenario's `process:` names regular expressions (matched with `re.search`
against each command the agent ran): expected steps for progress, goal patterns
for drift, change patterns for change fail %. A metric whose inputs the
scenario does not give, or whose denominator is empty, is None rather than a
made-up 0 or 1.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from core.metrics.formulas import fraction_of
from core.results.run import ProcessMetrics
from core.results.transcript import CommandRecord

if TYPE_CHECKING:  # a report's tables import the definitions below, and no matrix
    from core.matrix import ExpectedStep, ProcessConfig

# What each metric (a ProcessMetrics field) is, in a phrase: a report's note under the
# table that shows them (docs/METRICS.md, "Process metrics", says it at length).
DEFINITIONS: Mapping[str, str] = {
    "r_prog": "the weight of the scenario's expected steps the agent's commands reached, "
    "over the weight of them all",
    "r_prog_simple": "r_prog with every step weighing 1",
    "strategic_drift": "the share of the agent's commands that match no goal pattern",
    "strategic_drift_binary": "the same, counted (equal while commands weigh 1 each)",
    "change_fail_percentage": "the share of the commands matching a change pattern "
    "that failed (a fraction, 0 to 1)",
    "pr_revert_rate": "the share of changes reverted in review",
}


def r_prog(achieved: float, expected: float) -> float:
    """Fine-grained progress: achieved / expected steps. Weighted form with step
    weights, simple form with step counts."""
    return fraction_of(achieved, expected, "r_prog achieved steps")


def strategic_drift(alignments: Sequence[float], weights: Sequence[float]) -> float:
    """1 - sum(goal_alignment * weight) / sum(weight), alignments within [0, 1]."""
    if len(alignments) != len(weights):
        raise ValueError(f"{len(alignments)} alignments but {len(weights)} weights")
    if any(not 0.0 <= a <= 1.0 for a in alignments) or any(not w >= 0 for w in weights):
        raise ValueError("alignments must be within [0, 1] and weights non-negative")
    aligned = sum(a * w for a, w in zip(alignments, weights, strict=True))
    return 1.0 - fraction_of(aligned, sum(weights), "strategic drift aligned weight")


def strategic_drift_binary(aligned_actions: int, total_actions: int) -> float:
    """1 - goal-aligned actions / all actions."""
    return 1.0 - fraction_of(aligned_actions, total_actions, "goal-aligned actions")


def change_fail_percentage(failed_changes: int, total_changes: int) -> float:
    """Failed changes / changes, as a fraction in [0, 1] (ProjectScylla's formula)."""
    return fraction_of(failed_changes, total_changes, "failed changes")


def pr_revert_rate(reverted_changes: int, total_changes: int) -> float:
    """Reverted changes / changes."""
    return fraction_of(reverted_changes, total_changes, "reverted changes")


def process_metrics(commands: list[CommandRecord], config: ProcessConfig) -> ProcessMetrics:
    """Process metrics of one run. `pr_revert_rate` needs review data no transcript
    holds, so it stays None here.

    Strategic drift, weighted: every command weighs 1 and aligns 1 when it matches
    a goal pattern, else 0 (no per-command weights are configurable), so it equals
    the binary form; the weighted formula is kept for when weights exist.
    """
    texts = [c.command for c in commands]
    progress, progress_simple = _progress(texts, config.expected_steps)
    drift, drift_binary = _drift(texts, config.goal_patterns)
    return ProcessMetrics(
        r_prog=progress,
        r_prog_simple=progress_simple,
        strategic_drift=drift,
        strategic_drift_binary=drift_binary,
        change_fail_percentage=_change_fail(commands, config.change_patterns),
    )


def _matches(text: str, patterns: Sequence[str]) -> bool:
    return any(re.search(pattern, text) for pattern in patterns)


def _progress(texts: list[str], steps: Sequence[ExpectedStep]) -> tuple[float | None, float | None]:
    if not steps:
        return None, None
    done = [s for s in steps if any(re.search(s.pattern, text) for text in texts)]
    return (
        r_prog(sum(s.weight for s in done), sum(s.weight for s in steps)),
        r_prog(len(done), len(steps)),
    )


def _drift(texts: list[str], goals: Sequence[str]) -> tuple[float | None, float | None]:
    if not goals or not texts:
        return None, None
    alignments = [1.0 if _matches(text, goals) else 0.0 for text in texts]
    aligned = sum(1 for a in alignments if a)
    return (
        strategic_drift(alignments, [1.0] * len(texts)),
        strategic_drift_binary(aligned, len(texts)),
    )


def _change_fail(commands: list[CommandRecord], patterns: Sequence[str]) -> float | None:
    """Changes whose exit code is unknown cannot be judged and are left out."""
    changes = [c for c in commands if c.exit_code is not None and _matches(c.command, patterns)]
    if not changes:
        return None
    failed = sum(1 for c in changes if c.exit_code != 0)
    return change_fail_percentage(failed, len(changes))
