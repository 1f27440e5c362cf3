"""The headline: the summary table a report opens with, what its figures are computed
from, and the caveats under it (failures a median hides, approximate exit codes,
unknown costs, infrastructure errors)."""

from __future__ import annotations

from collections.abc import Mapping

from core.analysis.comparison import CONFIDENCE
from core.results.report import ExperimentReport, TierReport
from core.stats.significance import fisher_exact
from core.wording import plural
from scheduler.report.formatting import (
    ALL,
    PASS_RATE,
    Table,
    cells,
    duration,
    median_spread,
    num,
    pass_rate,
    pct,
    per_pass,
)
from scheduler.report.metric_tables import add_prices

# Distinct infrastructure errors named under the summary; the JSON has them all.
MAX_ERROR_REASONS = 3

# A composite score is a weighted mean of values in [0, 1]: a median at this value
# says nothing about the runs below it.
COMPOSITE_MAX = 1.0

SUMMARY_COLUMNS = [
    "tier",
    "scenario",
    "runs counted",
    "infra errors",
    "cancelled",
    "passes",
    PASS_RATE,
    "composite median / mean",
    "grade (median composite)",
    "uplift (median composite)",
    "impl rate median (±std)",
    "cost $ (median)",
    "cost of pass $",
    "duration (median)",
]

# Detail a narrow terminal can do without; the counts and headline figures stay.
# With a budget: runs it kept from starting, beside the cancelled ones.
NOT_RUN_COLUMN = "not run (budget)"

SUMMARY_NARROW_DROP = (
    "duration (median)",
    "cost of pass $",
    "impl rate median (±std)",
    "cost $ (median)",
)


def summary(report: ExperimentReport, scenario: str | None = None) -> Table:
    uplift = report.cross_tier.tier_uplift
    rows = []
    for tier_id, scope, t in cells(report, scenario):
        if scope != ALL:
            up = ""
        elif tier_id == report.cross_tier.baseline:
            up = "baseline"
        else:
            up = pct(uplift.get(tier_id))
        rows.append(
            [
                tier_id,
                scope,
                str(t.counted),
                str(t.errors),
                str(t.cancelled),
                *([str(t.not_run)] if report.budget is not None else []),
                str(t.passes),
                pass_rate(t.passes, t.counted),
                f"{num(t.composite_score.median)} / {num(t.composite_score.mean)}",
                t.grade or "-",
                up,
                median_spread(t.impl_rate),
                num(t.cost_usd.median, 4),
                per_pass(t.cost_of_pass),
                duration(t.duration_seconds.median),
            ]
        )
    columns = list(SUMMARY_COLUMNS)
    if report.budget is not None:
        columns.insert(columns.index("cancelled") + 1, NOT_RUN_COLUMN)
    return Table(
        "Summary",
        columns,
        rows,
        definitions() + hidden_failures(report, scenario) + footer(report, scenario),
        label_columns=2,
        narrow_drop=SUMMARY_NARROW_DROP,
    )


def definitions() -> list[str]:
    """What the headline figures are computed from (README, "Reading a report")."""
    return [
        f"pass rate = passes / runs counted, with its {CONFIDENCE:.0%} Wilson interval; "
        "runs counted = completed + agent_error + timeout + limit + tampered; infrastructure "
        "errors, "
        "cancelled runs and runs not run for the budget are counted apart and kept out of "
        "every figure",
        "grade: from the median composite score; uplift = (the tier's median composite - "
        "the baseline's) / the baseline's",
    ]


def hidden_failures(report: ExperimentReport, scenario: str | None = None) -> list[str]:
    """A note for each row whose median composite is the best possible although some runs
    failed: its grade and uplift cannot tell it from a tier where every run passed."""
    notes = []
    for tier_id, scope, t in cells(report, scenario):
        median = t.composite_score.median
        if median is None or median < COMPOSITE_MAX - 1e-9 or t.passes >= t.counted:
            continue
        where = tier_id if scope == ALL else f"{tier_id} / {scope}"
        notes.append(
            f"{where}: the median composite is {num(median)} (grade {t.grade or '-'}) although "
            f"{t.counted - t.passes} of {t.counted} counted runs failed; the mean composite is "
            f"{num(t.composite_score.mean)} and the pass rate {num(t.passes / t.counted)}"
        )
    return notes


def integrity(tiers: Mapping[str, TierReport]) -> list[str]:
    """How each tier's agents were confined (one line when all were alike), the runs
    that changed the files they were graded with, and a tier meeting more provider
    outages than the others (`lopsided_outages`)."""
    isolation = {tier_id: t.isolation for tier_id, t in tiers.items() if t.isolation}
    # One line when every tier that ran was confined alike (a tier the budget or a
    # cancel kept from running has no isolation to differ by).
    if len(set(isolation.values())) == 1:
        lines = [f"agents' isolation: {next(iter(isolation.values()))}"]
    else:
        lines = [f"{tier_id} isolation: {line}" for tier_id, line in isolation.items()]
    for tier_id, t in tiers.items():
        if t.tampered:
            lines.append(
                f"{tier_id}: {plural(t.tampered, 'run')} changed the files evaluation reads "
                "(status tampered: counted as failures)"
            )
    lines += lopsided_outages(tiers)
    return lines


def scoped(report: ExperimentReport, scenario: str | None) -> dict[str, TierReport]:
    """Each tier, or with `scenario` each tier's cell of it: what a view's figures are of."""
    if scenario is None:
        return dict(report.tiers)
    return {t: r.scenarios[scenario] for t, r in report.tiers.items() if scenario in r.scenarios}


def footer(report: ExperimentReport, scenario: str | None = None) -> list[str]:
    """The figures across tiers and the caveats under the summary: of the experiment, or
    with `scenario` of that scenario's runs alone (a view of one scenario that gave the
    experiment's figures would read as the scenario's)."""
    tiers = scoped(report, scenario)
    if scenario is None:
        c = report.cross_tier
    else:
        # Here only: the aggregation imports the matrix's models, which printing a
        # stored report must not (its cold start).
        from core.analysis.aggregate import cross_tier

        c = cross_tier(tiers, report.cross_tier.baseline)
    of = "" if scenario is None else f"{scenario}: "
    lines = [
        f"{of}baseline {c.baseline}; variance of the tiers' median pass_rate "
        f"{num(c.pass_rate_variance, 4)}; of their median cost {num(c.cost_variance, 6)}; "
        f"cost delta ${num(c.cost_delta, 4)}",
        *integrity(tiers),
        *(fewer_scenarios(report) if scenario is None else []),
    ]
    if c.uplift_note:
        lines.append(f"uplift: {c.uplift_note}")
    approximate = sum(t.approximate_exit_code_runs for t in tiers.values())
    if approximate:
        lines.append(
            f"exit codes are approximate for {plural(approximate, 'run')} (plain transcript "
            "fallback: "
            "error rates may be off; write events.jsonl for exact ones)"
        )
    unknown = sum(t.cost_unknown_runs for t in tiers.values())
    if unknown:
        lines.append(f"cost unknown for {plural(unknown, 'run')} ({add_prices(tiers.values())})")
    return lines + _error_lines(report, scenario, tiers)


def _error_lines(
    report: ExperimentReport, scenario: str | None, tiers: Mapping[str, TierReport]
) -> list[str]:
    """The most common infrastructure errors: of the experiment, or of the scenario's runs
    when they are at hand (else how many there were, and where their reasons are)."""
    if scenario is None:
        reasons = report.error_reasons
    elif report.runs is not None:
        from core.analysis.aggregate import error_reasons
        from core.analysis.columns import Group

        reasons = error_reasons(Group.of(r for r in report.runs if r.scenario == scenario))
    else:
        errors = sum(t.errors for t in tiers.values())
        if not errors:
            return []
        return [
            f"{plural(errors, 'infrastructure error')}: `report --format json --runs` gives "
            "their reasons"
        ]
    lines = [
        f"infrastructure error ({plural(count, 'run')}): {reason}"
        for reason, count in list(reasons.items())[:MAX_ERROR_REASONS]
    ]
    more = len(reasons) - MAX_ERROR_REASONS
    if more > 0:
        lines.append(
            f"and {more} other {'kind' if more == 1 else 'kinds'} of infrastructure error: "
            "`report --format json --runs`"
        )
    return lines


# Below this two-sided p of Fisher's exact test, a tier's share of runs meeting an
# outage is told apart from the other tiers'.
_OUTAGE_ALPHA = 0.05


def lopsided_outages(tiers: Mapping[str, TierReport]) -> list[str]:
    """A tier whose runs met model provider outages far more often than the other
    tiers' runs did. A provider's outage reaches every tier running at the time alike;
    an outage only the transcript tells of may be the agent's own words, and each buys
    its run another try (up to `max_attempts`) and leaves its failure out at the last."""
    lines = []
    # Runs cancelled or kept from starting by the budget never called a provider.
    started = {tier_id: t.runs - t.cancelled - t.not_run for tier_id, t in tiers.items()}
    total_runs = sum(started.values())
    total_outages = sum(t.outages for t in tiers.values())
    for tier_id, t in tiers.items():
        runs = started[tier_id]
        others, other_runs = total_outages - t.outages, total_runs - runs
        if not t.outages or other_runs == 0 or t.outages / runs <= others / other_runs:
            continue
        table = (t.outages, runs - t.outages, others, other_runs - others)
        if fisher_exact(*table) < _OUTAGE_ALPHA:
            lines.append(
                f"{tier_id}: {t.outages} of {plural(runs, 'run')} met a model provider "
                f"outage, the other tiers {others} of {other_runs}: a provider's outage "
                "reaches every tier alike, so this tier's agents may be reporting outages of "
                "their own, which buys each run another try and leaves its failure out "
                "(`scheduler show RUN` lists a run's deliveries)"
            )
    return lines


def fewer_scenarios(report: ExperimentReport) -> list[str]:
    """A tier with no counted run of a scenario the baseline has counted runs of (all of
    them infrastructure errors, say a judge that never answered there): its pooled
    figures and uplift are over other scenarios than the baseline's, which a pass
    rate beside the baseline's does not show."""
    baseline = report.tiers.get(report.cross_tier.baseline)
    if baseline is None:
        return []
    lines = []
    for tier_id, t in report.tiers.items():
        if tier_id == report.cross_tier.baseline:
            continue
        missing = sorted(
            name
            for name, b in baseline.scenarios.items()
            if b.counted and (name not in t.scenarios or not t.scenarios[name].counted)
        )
        if missing and t.counted:
            lines.append(
                f"{tier_id}: no counted run of {', '.join(missing)}, which the baseline has: "
                "its pass rate, composite and uplift are over fewer scenarios than the "
                "baseline's, not like for like (the per-scenario rows compare them)"
            )
    return lines
