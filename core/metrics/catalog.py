"""The per-run numbers every report summarizes, described once.

Each Metric names a number, says which RunResult fields it is read from (so
that core.analysis.columns reads every field of a run in one pass) and how a reader
sees it. Aggregation (core.analysis.aggregate) gives each its Statistics on
the TierReport; every report format and the CSV (scheduler/report/) iterate
over these tuples, so a metric added here appears everywhere at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from core.metrics.formulas import cost_of_pass


@dataclass(frozen=True)
class Metric:
    name: str  # its key in the report JSON and the CSV
    label: str  # what a reader sees in a table
    fields: tuple[str, ...]  # the RunResult fields it is computed from (dotted: nested)
    # From those fields' values; None: the one field's value as it is. None: the run
    # does not have the metric.
    compute: Callable[..., float | None] | None = None
    optional: bool = False  # no Statistics at all (not empty ones) when no run has it
    in_csv: bool = False  # one of the CSV's columns (in this order)


def _cost_of_pass(cost_usd: float | None, pass_rate: float) -> float | None:
    # Recomputed from cost and pass rate, so a run stored without it still counts.
    return None if cost_usd is None else cost_of_pass(cost_usd, pass_rate)


def _run_field(name: str, *, optional: bool = False, in_csv: bool = False) -> Metric:
    return Metric(name, name, (name,), optional=optional, in_csv=in_csv)


def _interaction(name: str, label: str) -> Metric:
    return Metric(name, label, (f"interaction.{name}",))


def _rate(name: str, label: str) -> Metric:
    """A rate over the run's target commands: none for a run that ran none (stored as 0,
    which a mean would read as every command failed, or repeated)."""
    return Metric(name, label, ("interaction.total_commands", f"interaction.{name}"), _of_commands)


def _of_commands(total_commands: int, rate: float) -> float | None:
    return rate if total_commands else None


# ProjectScylla's metrics: TierReport fields of the same names, shown under their names.
RUN_METRICS = (
    _run_field("pass_rate", in_csv=True),
    _run_field("impl_rate", in_csv=True),
    _run_field("composite_score", in_csv=True),
    _run_field("layered_composite", optional=True),
    _run_field("cost_usd", in_csv=True),
    _run_field("judge_cost_usd"),
    Metric(
        "cost_of_pass_per_run",
        "cost_of_pass_per_run",
        ("cost_usd", "pass_rate"),
        _cost_of_pass,
    ),
    _run_field("duration_seconds", in_csv=True),
    _run_field("input_tokens"),
    _run_field("output_tokens"),
    _run_field("base_context"),
    _run_field("context_growth_avg"),
)

# The interaction metrics (TierReport.interaction), in the order of llm-tool-test's
# guidance comparison: what a guidance author compares between AGENTS.md versions.
INTERACTION_METRICS = (
    _rate("error_rate", "error rate"),
    _interaction("help_invocations", "help-seeking (--help per run)"),
    _rate("first_try_success_rate", "first-try success"),
    _rate("retry_rate", "retry rate"),
    _rate("iteration_ratio", "iteration ratio"),
    _interaction("total_commands", "commands per run"),
)
