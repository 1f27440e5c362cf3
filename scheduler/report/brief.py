"""The terminal's one-screen report: per tier the headline (pass rate with its interval,
the verdict against the baseline, cost of pass), the most common reasons runs failed
with a run to look at for each, and where the full report is."""

from __future__ import annotations

from collections import Counter

from core.results.report import ExperimentReport, Verdict
from core.results.run import RunResult, RunStatus, error_key
from scheduler.report.formatting import Table, num, pass_rate
from scheduler.report.metric_tables import ADD_PRICES
from scheduler.report.verdicts import multiplicity_note, undetectable

# Reasons listed; the rest are counted in a note.
MOST_REASONS = 5
# A reason longer than this is cut (`scheduler show` has it whole).
REASON_CHARS = 90
INFRA = "infrastructure error: "


def brief_tables(report: ExperimentReport) -> list[Table]:
    return [_headline(report), _reasons(report)]


def full_report_line(report: ExperimentReport) -> str:
    return (
        f"the full report: scheduler report {report.experiment.id} --full (every section), "
        "or --format html > report.html (charts and the run table)"
    )


def _headline(report: ExperimentReport) -> Table:
    baseline = report.cross_tier.baseline
    rows = []
    unseen = []
    for tier_id, t in report.tiers.items():
        vs = t.analysis.vs_baseline
        rows.append(
            [
                tier_id,
                "baseline" if vs is None else vs.verdict.value,
                f"{t.passes}/{t.counted}",
                pass_rate(t.passes, t.counted),
                num(t.cost_of_pass, 4),
            ]
        )
        if vs is not None and vs.verdict is Verdict.no_difference and vs.detectable is not None:
            unseen.append(f"{tier_id}: {undetectable(vs.detectable)}")
    notes = [multiplicity_note(report.multiplicity), *unseen]
    errors = sum(t.errors for t in report.tiers.values())
    if errors:
        notes.append(f"{errors} infrastructure errors are kept out of these figures")
    if all(t.cost_of_pass is None for t in report.tiers.values()):
        notes.append(f"cost of pass unknown: {ADD_PRICES}")
    return Table(
        f"Verdict per tier against the baseline ({baseline})",
        ["tier", "verdict", "passes/counted", "pass rate [95% CI]", "cost of pass $"],
        rows,
        notes,
        label_columns=2,
    )


def _reasons(report: ExperimentReport) -> Table:
    exp_id = report.experiment.id
    counts: Counter[str] = Counter()
    example: dict[str, str] = {}
    if report.runs is not None:
        for run in report.runs:
            reason = _reason(run)
            if reason is not None:
                counts[reason] += 1
                example.setdefault(reason, run.run_id)
    else:  # a report without its runs names only the infrastructure errors
        counts.update({INFRA + r: n for r, n in report.error_reasons.items()})
    listed = counts.most_common(MOST_REASONS)
    rows = []
    for reason, n in listed:
        shown = reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 1] + "…"
        if reason in example:
            shown += f"\n  e.g. scheduler show {example[reason]}"
        rows.append([str(n), shown])
    notes = [] if rows else ["no run failed"]
    rest = len(counts) - len(listed)
    if rest > 0:
        notes.append(
            f"and {rest} other reasons: `scheduler report {exp_id} --format csv --runs` "
            "lists every run with its reason"
        )
    return Table(
        f"Most common failure reasons ({sum(counts.values())} runs failed)",
        ["runs", "reason, and a run that failed so"],
        rows,
        notes,
        label_columns=2,
    )


def _reason(run: RunResult) -> str | None:
    """What a failed run is counted under: its reason's first line (infrastructure
    errors as they are grouped everywhere); None for a run that passed or never ran."""
    if run.passed or run.status in (RunStatus.cancelled, RunStatus.not_run):
        return None
    if run.status is RunStatus.infra_error:
        return INFRA + error_key(run.fail_reason)
    first = run.fail_reason.splitlines()[0] if run.fail_reason else ""
    return first or f"{run.outcome} (no reason given)"
