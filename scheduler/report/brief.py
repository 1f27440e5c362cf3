"""The terminal's one-screen report: per tier the headline (pass rate with its interval,
the verdict against the baseline, cost of pass), the most common reasons runs failed
with a run to look at for each, and where the full report is."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from core.results.report import ExperimentReport, Verdict
from core.results.run import RunResult, RunStatus, error_key
from core.wording import plural
from scheduler.report.formatting import Table, pass_rate, per_pass
from scheduler.report.headline import fewer_scenarios, integrity
from scheduler.report.metric_tables import add_prices
from scheduler.report.verdicts import (
    multiplicity_note,
    one_test_only,
    stratified_tiers,
    undetectable,
)

# Reasons listed; the rest are counted in a note.
MOST_REASONS = 5
# A reason longer than this is cut at a word (`scheduler show` has it whole).
REASON_CHARS = 90
INFRA = "infrastructure error: "


def brief_tables(report: ExperimentReport, show_version: int | None = None) -> list[Table]:
    """`show_version`: the version `scheduler show` must be told for its runs' results to
    be this report's (None: its default version is this report's)."""
    return [verdict_table(report), _reasons(report, show_version)]


def full_report_line(report: ExperimentReport, pinned: bool = False) -> str:
    """Where the rest is; each command in backticks, which the terminal never breaks, and
    whole, to paste. `pinned`: this report is not the version `report` gives by
    default, so the commands name its version."""
    command = f"scheduler report {report.experiment.id}" + (
        f" --version {report.version}" if pinned else ""
    )
    return (
        f"the full report: `{command} --full` (every section), or "
        f"`{command} --format html > report.html` (charts and the run table)"
    )


def verdict_table(report: ExperimentReport) -> Table:
    """Each tier's verdict against the baseline, pass rate and cost of pass: what the
    terminal's one screen and the HTML report open with."""
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
                per_pass(t.cost_of_pass),
            ]
        )
        # What the run-level test could detect says nothing of a verdict read across
        # scenarios (verdicts.verdict leaves it out there too).
        if (
            vs is not None
            and vs.verdict is Verdict.no_difference
            and vs.detectable is not None
            and vs.verdict_from is None
        ):
            unseen.append(f"{tier_id}: {undetectable(vs.detectable)}")
    split = [n for tier_id, t in report.tiers.items() if (n := one_test_only(tier_id, t.analysis))]
    if split:  # a verdict beside pass rates that did not differ, explained
        split[-1] += " (a verdict is either test's: passes, composite scores)"
    against = {t: r.analysis.vs_baseline for t, r in report.tiers.items()}
    stratified = stratified_tiers(against)
    family = multiplicity_note(
        report.multiplicity,
        report.multiplicity_across_scenarios,
        stratified,
        others=any(vs is not None and t not in stratified for t, vs in against.items()),
    )
    notes = [family, *split, *unseen, *integrity(report.tiers), *fewer_scenarios(report)]
    errors = sum(t.errors for t in report.tiers.values())
    if errors:
        notes.append(
            f"{plural(errors, 'infrastructure error')} {'is' if errors == 1 else 'are'} kept out "
            "of these figures"
        )
    # Only a counted run's model without a price leaves a cost unknown: infrastructure
    # errors have no cost, and a price would change nothing for them.
    unpriced = [tier_id for tier_id, t in report.tiers.items() if t.cost_unknown_runs]
    if unpriced:
        prices = add_prices(report.tiers[tier_id] for tier_id in unpriced)
        notes.append(f"cost unknown for runs of {', '.join(unpriced)}: {prices}")
    return Table(
        f"Verdict per tier against the baseline ({baseline})",
        ["tier", "verdict", "passes/counted", "pass rate [95% CI]", "cost of pass $"],
        rows,
        notes,
        # The verdict wraps at its words: a narrow terminal keeps every column whole.
        words=("verdict",),
    )


def failure_reasons(runs: Iterable[RunResult]) -> list[tuple[str, int, str]]:
    """(reason, runs, the first run's id) of every reason runs failed for, most common
    first (then in the runs' order)."""
    counts: Counter[str] = Counter()
    example: dict[str, str] = {}
    for run in runs:
        reason = failure_reason(run)
        if reason is not None:
            counts[reason] += 1
            example.setdefault(reason, run.run_id)
    return [(reason, n, example[reason]) for reason, n in counts.most_common()]


def failure_reason(run: RunResult) -> str | None:
    """What a failed run is counted under: its reason's first line (infrastructure
    errors as they are grouped everywhere); None for a run that passed or never ran."""
    if run.passed or run.status in (RunStatus.cancelled, RunStatus.not_run):
        return None
    if run.status is RunStatus.infra_error:
        return INFRA + error_key(run.fail_reason)
    first = run.fail_reason.splitlines()[0] if run.fail_reason else ""
    return first or f"{run.outcome} (no reason given)"


def cut(reason: str, most: int = REASON_CHARS) -> str:
    """At most `most` characters, cut after the last whole word that fits (mid-word
    only for a single word longer than that)."""
    if len(reason) <= most:
        return reason
    kept = reason[: most - 1]
    space = kept.rfind(" ")
    return (kept[:space].rstrip() if space > 0 else kept) + "…"


def _reasons(report: ExperimentReport, show_version: int | None) -> Table:
    if report.runs is not None:
        found = failure_reasons(report.runs)
    else:  # a report without its runs names only the infrastructure errors
        found = [(INFRA + r, n, "") for r, n in report.error_reasons.items()]
    shown = found[:MOST_REASONS]
    rows = [[str(n), cut(reason)] for reason, n, _ in shown]
    notes = [] if rows else ["no run failed"]
    rest = len(found) - len(rows)
    if rest > 0:
        notes.append(
            f"and {rest} other reasons: `scheduler report {report.experiment.id} --format csv "
            "--runs` lists every run with its reason"
        )
    failed = sum(n for _, n, _ in found)
    pinned = "" if show_version is None else f" --version {show_version}"
    return Table(
        "Most common failure reasons" + (f" ({plural(failed, 'run')} failed)" if failed else ""),
        ["runs", "reason, and a run that failed so"],
        rows,
        notes,
        label_columns=2,
        commands=tuple(f"e.g. scheduler show {run}{pinned}" if run else "" for *_, run in shown),
    )
