"""What a report says, as titled tables of text: markdown, HTML and the terminal lay them out.

One place decides which numbers a reader sees and how they are written, so
every format says the same thing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from core.analysis.comparison import ALPHA, POWER
from core.analysis.group import BOOTSTRAP_RESAMPLES, CONFIDENCE, PASS_K
from core.metrics.catalog import INTERACTION_METRICS, RUN_METRICS
from core.results.report import (
    Comparison,
    Detectable,
    ExperimentComparison,
    ExperimentReport,
    Interval,
    Multiplicity,
    Statistics,
    TierReport,
    Verdict,
)
from core.stats.significance import wilson_interval

ALL = "(all)"
# Distinct infrastructure errors named under the summary; the JSON has them all.
MAX_ERROR_REASONS = 3
# The headline pass rate, named by what it is wherever it is a column.
PASS_RATE = f"pass rate (passes/counted) [{CONFIDENCE:.0%} CI]"
# A composite score is a weighted mean of values in [0, 1]: a median at this value
# says nothing about the runs below it.
COMPOSITE_MAX = 1.0
# Columns of per-call context growth in a table; the HTML chart shows every call.
CONTEXT_CALLS_SHOWN = 10


@dataclass(frozen=True)
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    # The first `label_columns` columns name the row (tier, scenario, metric): left-aligned.
    label_columns: int = 1
    # Columns a narrow terminal leaves out, first to go first; the others wrap.
    narrow_drop: tuple[str, ...] = ()


# --- formatting ------------------------------------------------------------------------------


def num(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf"
    return f"{value:.{digits}f}"


def median_spread(stats: Statistics, digits: int = 3) -> str:
    if stats.count == 0:
        return "-"
    if stats.count == 1:
        return num(stats.median, digits)
    return f"{num(stats.median, digits)} (±{num(stats.std_dev, digits)})"


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:+.1f}%"


def p_value(p: float | None) -> str:
    if p is None:
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def with_interval(value: float | None, interval: Interval | None) -> str:
    if value is None:
        return "-"
    if interval is None:
        return num(value)
    return f"{num(value)} [{num(interval.low)}, {num(interval.high)}]"


def signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def bracket(interval: Interval | None) -> str:
    """The interval of a difference, signed as the difference is (and as github shows it)."""
    return "-" if interval is None else f"[{signed(interval.low)}, {signed(interval.high)}]"


def signed_interval(value: float | None, interval: Interval | None) -> str:
    if value is None:
        return "-"
    if interval is None:
        return signed(value)
    return f"{signed(value)} [{signed(interval.low)}, {signed(interval.high)}]"


CORRECTION_NAMES = {"holm": "Holm", "bh": "Benjamini-Hochberg", "none": "no correction"}


def multiplicity_note(m: Multiplicity | None) -> str:
    """How the p-values were corrected and what the verdicts are read from."""
    if m is None:
        return (
            f"verdicts at alpha {ALPHA:g} per test, not corrected for multiple comparisons "
            "(a report stored before corrections: `--correction holm` corrects it)"
        )
    if m.correction == "none":
        return (
            f"verdicts at alpha {m.alpha:g} per test, not corrected for multiple comparisons "
            f"({m.tests} tests: some raw p-values fall under alpha by chance)"
        )
    guards = "false discovery rate" if m.correction == "bh" else "family-wise error rate"
    return (
        f"p adj.: {CORRECTION_NAMES[m.correction]}-adjusted across all {m.tests} tests "
        f"({guards} {m.alpha:g}); verdicts come from the adjusted p-values"
    )


def detectable_note(m: Multiplicity | None) -> str:
    level = ALPHA if m is None else m.lone_test_alpha
    return (
        f"could not detect: the smallest rise / fall of the pass rate from the reference's "
        f"rate that these runs detect with {POWER:.0%} power (normal approximation, two-sided, "
        f"at {level:.4g}, the level one test must reach alone); a smaller difference may "
        "exist and go unseen"
    )


def verdict(c: Comparison) -> str:
    """The verdict; "no significant difference" says what the runs could not have seen."""
    if c.verdict is not Verdict.no_difference or c.detectable is None:
        return c.verdict.value
    return f"{c.verdict.value} ({undetectable(c.detectable)})"


def undetectable(d: Detectable) -> str:
    rise = "any rise" if d.improvement is None else f"a rise < {num(d.improvement)}"
    fall = "any fall" if d.regression is None else f"a fall < {num(d.regression)}"
    return f"could not detect {rise} or {fall}"


def pass_share(passes: int, counted: int) -> Interval | None:
    """The Wilson interval of passes / counted runs, None without counted runs; the share
    itself is `passes / counted` (analysis.pass_rate_ci is the same interval)."""
    if counted == 0:
        return None
    low, high = wilson_interval(passes, counted, CONFIDENCE)
    return Interval(low=low, high=high, confidence=CONFIDENCE, method="Wilson score")


def pass_rate(passes: int, counted: int) -> str:
    """The headline pass rate: passes / counted with its Wilson interval."""
    return with_interval(passes / counted if counted else None, pass_share(passes, counted))


def header(report: ExperimentReport) -> str:
    e = report.experiment
    counted = e.completed_runs - e.errors - e.cancelled - e.not_run
    not_run = f", {e.not_run} not run (budget)" if e.not_run else ""
    version = ""
    if report.version > 1:
        version = f" — report version {report.version} ({report.version_note})"
    return (
        f"{e.name} ({e.id}): {e.status.value}, {e.completed_runs}/{e.total_runs} runs, "
        f"{counted} counted, {e.passes} passed, {e.errors} infrastructure errors, "
        f"{e.cancelled} cancelled{not_run}{version}"
    )


def banner(report: ExperimentReport) -> list[str]:
    """What a reader must see before anything else: that the budget stopped runs."""
    return [report.budget.notice] if report.budget is not None else []


def cells(
    report: ExperimentReport, scenario: str | None = None
) -> Iterable[tuple[str, str, TierReport]]:
    """(tier, scenario or ALL, report) for every tier, then its scenarios; with `scenario`,
    only that scenario of each tier."""
    for tier_id, tier in report.tiers.items():
        if scenario is None:
            yield tier_id, ALL, tier
        for scenario_id, cell in tier.scenarios.items():
            if scenario in (None, scenario_id):
                yield tier_id, scenario_id, cell


# --- the report's tables ---------------------------------------------------------------------

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
    "duration s (median)",
]
# Detail a narrow terminal can do without; the counts and headline figures stay.
# With a budget: runs it kept from starting, beside the cancelled ones.
NOT_RUN_COLUMN = "not run (budget)"
SUMMARY_NARROW_DROP = (
    "duration s (median)",
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
                num(t.cost_of_pass, 4),
                num(t.duration_seconds.median, 1),
            ]
        )
    columns = list(SUMMARY_COLUMNS)
    if report.budget is not None:
        columns.insert(columns.index("cancelled") + 1, NOT_RUN_COLUMN)
    return Table(
        "Summary",
        columns,
        rows,
        definitions() + hidden_failures(report, scenario) + footer(report),
        label_columns=2,
        narrow_drop=SUMMARY_NARROW_DROP,
    )


def definitions() -> list[str]:
    """What the headline figures are computed from (README, "Reading a report")."""
    return [
        f"pass rate = passes / runs counted, with its {CONFIDENCE:.0%} Wilson interval; "
        "runs counted = completed + agent_error + timeout + limit; infrastructure errors, "
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


def footer(report: ExperimentReport) -> list[str]:
    c = report.cross_tier
    lines = [
        f"baseline {c.baseline}; variance of the tiers' median pass_rate "
        f"{num(c.pass_rate_variance, 4)}; of their median cost {num(c.cost_variance, 6)}; "
        f"cost delta ${num(c.cost_delta, 4)}"
    ]
    if c.uplift_note:
        lines.append(f"uplift: {c.uplift_note}")
    approximate = sum(t.approximate_exit_code_runs for t in report.tiers.values())
    if approximate:
        lines.append(
            f"exit codes are approximate for {approximate} runs (plain transcript fallback: "
            "error rates may be off; write events.jsonl for exact ones)"
        )
    unknown = sum(t.cost_unknown_runs for t in report.tiers.values())
    if unknown:
        lines.append(
            f"cost unknown for {unknown} runs (model without a price; add it under `pricing:`)"
        )
    for reason, count in list(report.error_reasons.items())[:MAX_ERROR_REASONS]:
        lines.append(f"infrastructure error ({count} runs): {reason}")
    more = len(report.error_reasons) - MAX_ERROR_REASONS
    if more > 0:
        lines.append(f"and {more} other infrastructure errors: `report --format json --runs`")
    return lines


def cross_tier(report: ExperimentReport) -> Table:
    """ProjectScylla's cross-tier figures: each metric's uplift, consistency, the cheapest
    tier per pass and the best value (docs/METRICS.md defines them and their edge cases)."""
    c = report.cross_tier
    rows = []
    for tier_id, t in report.tiers.items():
        up = c.uplift.get(tier_id)
        if tier_id == c.baseline:
            changes = ["baseline"] * 4
        elif up is None:
            changes = ["n/a"] * 4
        else:
            changes = [pct(up.pass_rate), pct(up.impl_rate), pct(up.composite), pct(up.cost_change)]
        rows.append([tier_id, *changes, num(t.consistency), num(t.cost_of_pass, 4)])
    frontier = (
        "no tier passed, so there is no frontier cost of pass"
        if c.frontier_tier is None
        else f"frontier cost of pass ${num(c.frontier_cost_of_pass, 4)} ({c.frontier_tier}, "
        "the cheapest tier per pass)"
    )
    value = (
        "no tier scored above 0, so no tier is the best value"
        if c.best_value_tier is None
        else f"best value: {c.best_value_tier} (highest median composite per median $)"
    )
    return Table(
        f"Cross-tier against the baseline ({c.baseline})",
        [
            "tier",
            "pass rate uplift",
            "impl rate uplift (median)",
            "composite uplift (median)",
            "cost change (median)",
            "consistency (composite)",
            "cost of pass $",
        ],
        rows,
        [
            f"{frontier}; {value}",
            f"variance of the tiers' median impl rate {num(c.impl_rate_variance, 4)}, "
            f"median pass_rate {num(c.pass_rate_variance, 4)}",
            "uplift = (tier - baseline) / baseline, n/a where the baseline's figure is 0; "
            "consistency = 1 - std/mean of the composite score, clamped to [0, 1]",
        ],
    )


def significance(report: ExperimentReport, scenario: str | None = None) -> Table:
    baseline = report.cross_tier.baseline
    rows = []
    for tier_id, scope, t in cells(report, scenario):
        a = t.analysis
        vs = a.vs_baseline
        rows.append(
            [
                tier_id,
                scope,
                pass_rate(t.passes, t.counted),
                with_interval(t.composite_score.median, a.composite_median_ci),
                *(_versus(vs) if vs is not None else ["baseline"] + [""] * (len(TEST_COLUMNS) - 1)),
            ]
        )
    return Table(
        f"Confidence and significance against the baseline ({baseline})",
        [
            "tier",
            "scenario",
            PASS_RATE,
            "median composite [95% CI]",
            *TEST_COLUMNS,
        ],
        rows,
        [
            "pass rate intervals: Wilson score; median composite intervals: percentile "
            f"bootstrap ({BOOTSTRAP_RESAMPLES} resamples, fixed seed)",
            *test_notes(report.multiplicity),
        ],
        label_columns=2,
        # The composite's medians; its test, effect size and every p-value stay.
        narrow_drop=("median composite [95% CI]", "Δ median composite"),
    )


# The columns of one test against a reference, in a report and in compare.
TEST_COLUMNS = [
    "Δ pass rate",
    "Fisher p",
    "Fisher p adj.",
    "Δ pass rate 95% CI",
    "Δ median composite",
    "Mann-Whitney p",
    "Mann-Whitney p adj.",
    "Cliff's δ composite [95% CI]",
    "verdict",
]


def test_notes(m: Multiplicity | None) -> list[str]:
    return [
        "Fisher's exact test (two-sided) on passes; Mann-Whitney U (two-sided) on composite scores",
        "effect sizes: Δ pass rate with Newcombe's hybrid score interval; Cliff's δ = "
        "P(a run here scores above a reference run) - P(below), its interval from Cliff's "
        "consistent variance estimator (Feng & Cliff's asymmetric form)",
        multiplicity_note(m),
        detectable_note(m),
    ]


def _versus(c: Comparison) -> list[str]:
    return [
        signed(c.pass_rate_delta),
        p_value(c.fisher_p),
        p_value(c.fisher_p_adjusted),
        bracket(c.risk_difference_ci),
        signed(c.composite_median_delta),
        p_value(c.mann_whitney_p),
        p_value(c.mann_whitney_p_adjusted),
        signed_interval(c.cliffs_delta, c.cliffs_delta_ci),
        verdict(c),
    ]


def pass_at_k(report: ExperimentReport, scenario: str | None = None) -> Table:
    ks = [
        k for k in PASS_K if any(k in t.analysis.pass_at_k for _, _, t in cells(report, scenario))
    ]
    rows = [
        [
            tier_id,
            scope,
            *(num(t.analysis.pass_at_k.get(k)) for k in ks),
            *(num(t.analysis.pass_hat_k.get(k)) for k in ks),
            ", ".join(t.analysis.flaky_scenarios) or "-",
        ]
        for tier_id, scope, t in cells(report, scenario)
    ]
    return Table(
        "pass@k and pass^k",
        ["tier", "scenario", *(f"pass@{k}" for k in ks), *(f"pass^{k}" for k in ks), "flaky"],
        rows,
        [
            "pass@k = 1 - C(n-c,k)/C(n,k): chance at least one of k runs passes; "
            "pass^k = C(c,k)/C(n,k): chance all k pass; a tier averages its scenarios",
            "flaky: scenarios where some runs passed and some failed",
        ],
        label_columns=2,
    )


def seed_metrics(report: ExperimentReport, tier_id: str) -> Table:
    tier = report.tiers[tier_id]
    rows = []
    for scenario, cell in [(ALL, tier), *tier.scenarios.items()]:
        for metric in RUN_METRICS:
            stats: Statistics | None = getattr(cell, metric.name)
            if stats is not None and stats.count:
                rows.append([scenario, metric.label, *_stat_cells(stats)])
        for name, stats in cell.process.items():
            rows.append([scenario, name, *_stat_cells(stats)])
    return Table(
        f"Seed metrics: {tier_id} (grade {tier.grade or '-'}, "
        f"cost of pass ${num(tier.cost_of_pass, 4)})",
        ["scenario", "metric", "median", "mean", "mode", "std_dev", "min", "max", "n"],
        rows,
        label_columns=2,
    )


def _stat_cells(s: Statistics) -> list[str]:
    values = (s.median, s.mean, s.mode, s.std_dev, s.min, s.max)
    return [*(num(v, 4) for v in values), str(s.count)]


def interaction(report: ExperimentReport, scenario: str | None = None) -> Table:
    rows = [
        [tier_id, scope, *(num(_mean(t.interaction.get(m.name))) for m in INTERACTION_METRICS)]
        for tier_id, scope, t in cells(report, scenario)
    ]
    return Table(
        "Interaction metrics (mean per run)",
        ["tier", "scenario", *(m.label for m in INTERACTION_METRICS)],
        rows,
        label_columns=2,
    )


def guidance(report: ExperimentReport, scenario: str) -> Table:
    """One scenario, each tier side by side (the evaluation seed's guidance comparison)."""
    tiers = {tier_id: t.scenarios.get(scenario) for tier_id, t in report.tiers.items()}
    rows = [
        [
            "pass rate (passes/counted)",
            *(num(c.passes / c.counted) if c and c.counted else "-" for c in tiers.values()),
        ],
        *(
            [
                m.label,
                *(num(_mean(c.interaction.get(m.name))) if c else "-" for c in tiers.values()),
            ]
            for m in INTERACTION_METRICS
        ),
        ["runs counted", *(str(c.counted) if c else "0" for c in tiers.values())],
    ]
    return Table(
        f"Guidance comparison: {scenario}",
        ["metric", *tiers],
        rows,
        [
            "means over each tier's runs of this scenario; lower error rate and help-seeking, "
            "higher first-try success mean the guidance works"
        ],
    )


def _mean(stats: Statistics | None) -> float | None:
    return None if stats is None else stats.mean


def context_growth(report: ExperimentReport) -> Table:
    calls = min(
        CONTEXT_CALLS_SHOWN, max((len(t.context_by_call) for t in report.tiers.values()), default=0)
    )
    rows = [
        [
            tier_id,
            num(t.base_context.median, 0),
            num(t.context_growth_avg.median, 1),
            *(
                num(t.context_by_call[i].mean, 0) if i < len(t.context_by_call) else "-"
                for i in range(calls)
            ),
        ]
        for tier_id, t in report.tiers.items()
    ]
    return Table(
        "Context growth per LLM call",
        [
            "tier",
            "base context (median)",
            "growth per call (median)",
            *(f"call {i + 1}" for i in range(calls)),
        ],
        rows,
        ["call i: mean input tokens of the i-th LLM call over the runs that made it"],
    )


def within_noise_notes(report: ExperimentReport) -> list[str]:
    """One note per tier whose result against the baseline lies within the judge's noise."""
    notes = []
    for flag in report.judge.within_noise if report.judge is not None else []:
        uplift = "" if flag.uplift is None else f"uplift {pct(flag.uplift)}, "
        note = (
            f"{flag.tier}: {uplift}Δ median composite {signed(flag.difference)}, lies within the "
            f"judge's noise (less than 2 judge SDs of the difference, {num(flag.band, 4)})"
        )
        if flag.verdict in (Verdict.better, Verdict.worse, Verdict.mixed):
            note += f"; its verdict ({flag.verdict.value}) could be the judge's noise alone"
        notes.append(note)
    return notes


def judge_noise(report: ExperimentReport) -> Table | None:
    """The judge's own noise beside the runs' spread, per tier (core/analysis/judge_noise.py);
    None when no run was judged."""
    summary = report.judge
    if summary is None:
        return None
    rows = [
        [
            tier_id,
            str(t.judged_runs),
            str(t.repeats),
            num(t.judge_variance, 4),
            num(t.judge_sd_of_mean, 4),
            num(t.run_variance, 4),
            num(t.judge_share),
        ]
        for tier_id, t in summary.tiers.items()
    ]
    notes = [
        f"{summary.judgments} judgments, {summary.cached} from cache",
        "judge variance: mean over runs of the sample variance of their K judgments; judge SD "
        "of a run's score: sqrt(judge variance / K); run-to-run variance: sample variance of "
        "the runs' scores (each the mean of its K); judge share: (judge variance / K) / "
        "run-to-run variance",
    ]
    if all(t.judge_variance is None for t in summary.tiers.values()):
        notes.append("one judgment per run: set `judge: {repeats: 3}` to measure the noise")
    above = [tier_id for tier_id, t in summary.tiers.items() if (t.judge_share or 0) > 1]
    if above:
        # Not a share any more: say what can make the runs vary less than the judge alone.
        notes.append(
            f"judge share above 1 ({', '.join(above)}): the runs' scores vary less than the "
            "judge alone would make them, by chance with few runs, or because runs with the "
            "same transcript get the same judgments from the judgment cache"
        )
    notes += within_noise_notes(report)
    return Table(
        "Judge noise",
        [
            "tier",
            "judged runs",
            "judgments per run (K)",
            "judge variance",
            "judge SD of a run's score",
            "run-to-run variance",
            "judge share",
        ],
        rows,
        notes,
    )


def scenario_tables(report: ExperimentReport, scenario: str) -> list[Table]:
    """The view of one scenario: its tiers side by side, then its rows of the report."""
    return [
        guidance(report, scenario),
        summary(report, scenario),
        significance(report, scenario),
        pass_at_k(report, scenario),
        interaction(report, scenario),
    ]


def adaptive(report: ExperimentReport) -> list[Table]:
    """How many runs each cell of an adaptive experiment got, why, and by which procedure."""
    if report.adaptive is None:
        return []
    rows = [
        [tier, scenario, str(stop.runs), stop.reason]
        for tier, scenarios in report.adaptive.cells.items()
        for scenario, stop in scenarios.items()
    ]
    return [
        Table(
            "Adaptive runs: where each tier x scenario stopped",
            ["tier", "scenario", "runs", "stopped because"],
            rows,
            [f"procedure: {report.adaptive.procedure}"],
            label_columns=2,
        )
    ]


def report_tables(report: ExperimentReport) -> list[Table]:
    """Every table of the full report, in reading order."""
    scenarios = list(dict.fromkeys(s for t in report.tiers.values() for s in t.scenarios))
    return [
        summary(report),
        *adaptive(report),
        cross_tier(report),
        significance(report),
        pass_at_k(report),
        interaction(report),
        *(guidance(report, s) for s in scenarios),
        *([noise] if (noise := judge_noise(report)) is not None else []),
        context_growth(report),
        *(seed_metrics(report, tier_id) for tier_id in report.tiers),
    ]


# --- compare ---------------------------------------------------------------------------------


def comparison_title(result: ExperimentComparison) -> str:
    return (
        f"{result.experiment.name} ({result.experiment.id}) against "
        f"{result.reference.name} ({result.reference.id})"
    )


def comparison(result: ExperimentComparison) -> Table:
    rows = []
    for tier_id, c in result.tiers.items():
        rows.append([tier_id, ALL, *_compared(c)])
        for scenario, cell in result.scenarios.get(tier_id, {}).items():
            rows.append([tier_id, scenario, *_compared(cell)])
    notes = [
        f"B = {result.experiment.id}, A = {result.reference.id}; deltas are B - A; "
        f"pass rate = passes / runs counted, with its {CONFIDENCE:.0%} Wilson interval",
        *test_notes(result.multiplicity),
        "regressions (tiers significantly worse in B): "
        + (", ".join(result.regressions) or "none"),
    ]
    if result.unmatched_tiers:
        notes.append("tiers in only one experiment: " + ", ".join(result.unmatched_tiers))
    return Table(
        "B against A, per tier and tier x scenario",
        [
            "tier",
            "scenario",
            "runs counted A/B",
            f"A {PASS_RATE}",
            f"B {PASS_RATE}",
            *TEST_COLUMNS[:4],
            "median composite A → B",
            *TEST_COLUMNS[4:],
        ],
        rows,
        notes,
        label_columns=2,
        narrow_drop=(
            "Cliff's δ composite [95% CI]",
            "Δ pass rate 95% CI",
            "median composite A → B",
            "Mann-Whitney p",
            "Fisher p",
        ),
    )


def _compared(c: Comparison) -> list[str]:
    tests = _versus(c)
    return [
        f"{c.reference_runs}/{c.runs}",
        pass_rate(c.reference_passes, c.reference_runs),
        pass_rate(c.passes, c.runs),
        *tests[:4],  # the pass-rate test, then the composite's medians beside its test
        f"{num(c.reference_composite_median)} → {num(c.composite_median)}",
        *tests[4:],
    ]
