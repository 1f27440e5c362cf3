"""A report's parts in reading order: the banner, the header line, then its tables (the
full report's, or the view of one scenario). The tables themselves come from
scheduler.report.headline, .verdicts, .metric_tables and .noise."""

from __future__ import annotations

from core.results.report import ExperimentReport
from core.wording import plural
from scheduler.report.formatting import Table
from scheduler.report.headline import summary
from scheduler.report.metric_tables import (
    adaptive,
    context_growth,
    cross_tier,
    guidance,
    interaction,
    pass_at_k,
    rewards,
    seed_metrics,
)
from scheduler.report.noise import judge_noise
from scheduler.report.scenarios import across_scenario_tables
from scheduler.report.verdicts import significance


def header(report: ExperimentReport) -> str:
    e = report.experiment
    counted = e.completed_runs - e.errors - e.cancelled - e.not_run
    not_run = f", {e.not_run} not run (budget)" if e.not_run else ""
    version = ""
    if report.version > 1:
        version = f" — report version {report.version} ({report.version_note})"
    return (
        f"{e.name} ({e.id}): {e.status.value}, {e.completed_runs}/{e.total_runs} runs, "
        f"{counted} counted, {e.passes} passed, {plural(e.errors, 'infrastructure error')}, "
        f"{e.cancelled} cancelled{not_run}{version}"
    )


def banner(report: ExperimentReport) -> list[str]:
    """What a reader must see before anything else: that the budget stopped runs, that
    runs lack their evidence."""
    notices = [report.budget.notice if report.budget is not None else None]
    return [n for n in [*notices, report.evidence_notice] if n]


def scenario_tables(report: ExperimentReport, scenario: str) -> list[Table]:
    """The view of one scenario: its tiers side by side, then its rows of the report."""
    return [
        guidance(report, scenario),
        summary(report, scenario),
        significance(report, scenario),
        *rewards(report, scenario),
        pass_at_k(report, scenario),
        interaction(report, scenario),
    ]


def report_tables(report: ExperimentReport) -> list[Table]:
    """Every table of the full report, in reading order."""
    scenarios = list(dict.fromkeys(s for t in report.tiers.values() for s in t.scenarios))
    return [
        summary(report),
        *adaptive(report),
        cross_tier(report),
        significance(report),
        *across_scenario_tables(report),
        *rewards(report),
        pass_at_k(report),
        interaction(report),
        *(guidance(report, s) for s in scenarios),
        *([noise] if (noise := judge_noise(report)) is not None else []),
        context_growth(report),
        *(seed_metrics(report, tier_id) for tier_id in report.tiers),
    ]
