"""Scenarios as clusters, in a section of its own: each tier's pass rate and mean composite
with clustered standard errors, and each tier against the baseline answering two questions
by name, "on these scenarios" and "on scenarios like these" (core.analysis.scenarios).

A report whose tiers have a single scenario has none of these figures and shows nothing
here: its tables are what they were. `scheduler compare` shows the two questions the
same way (B's tier against A's), `--format github` the section in short, and
`--format csv` its figures in columns of their own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from core.analysis.comparison import ALPHA, CONFIDENCE
from core.analysis.scenarios import too_few_for_interval
from core.results.report import (
    ClusteredMean,
    Comparison,
    ExperimentComparison,
    ExperimentReport,
    Interval,
    Multiplicity,
    NoInterval,
    PairedDifference,
    ScenarioComparison,
    TierReport,
    Verdict,
)
from core.stats.clustered import (
    MIN_SCENARIOS_FOR_INTERVAL,
    MIN_SCENARIOS_TO_GENERALISE,
    MOST_PLANNED,
    PLANNING_TARGET,
    scenarios_to_detect,
)
from core.wording import plural
from scheduler.report.formatting import (
    NO_INTERVAL,
    Table,
    bracket,
    num,
    p_value,
    points,
    signed,
)
from scheduler.report.verdicts import ACROSS_SCENARIOS, corrected_across

THESE = "on these scenarios"
LIKE_THESE = "on scenarios like these"


def across_scenario_tables(report: ExperimentReport) -> list[Table]:
    """The section's tables; none when no tier has two or more scenarios."""
    tables = []
    if any(t.analysis.pass_rate_clustered is not None for t in report.tiers.values()):
        tables.append(clustered_table(report))
    if any(t.analysis.across_scenarios is not None for t in report.tiers.values()):
        tables.append(questions_table(report))
    return tables


def clustered_table(report: ExperimentReport) -> Table:
    rows = []
    for tier_id, tier in report.tiers.items():
        a = tier.analysis
        for measure, c in (
            ("pass rate", a.pass_rate_clustered),
            ("mean composite", a.composite_mean_clustered),
        ):
            if c is not None:
                rows.append([tier_id, measure, *_clustered_row(c)])
    return Table(
        "Scenarios as clusters: each tier's mean with error bars that respect its scenarios",
        [
            "tier",
            "measure",
            "mean",
            "scenarios (G) / runs",
            "SE if runs were independent",
            "clustered SE (CR0)",
            "clustered SE (CR1)",
            f"{CONFIDENCE:.0%} t interval (G-1 df)",
            "design effect",
            "implied intra-scenario correlation",
        ],
        rows,
        [
            "runs of one scenario share its difficulty, so they are not independent draws "
            "(Miller 2024, arXiv 2411.00640): clustered SE = sqrt(sum over scenarios of (sum "
            "of the scenario's residuals)^2) / runs (CR0); CR1 multiplies it by sqrt(G / (G - "
            "1)), the small-sample correction the interval uses",
            "interval: mean ± t(G - 1) * CR1 SE, clipped to [0, 1]; with few scenarios it is "
            "wide because only G - 1 degrees of freedom are there to estimate the spread",
            "design effect = (CR0 SE / SE if independent)^2; intra-scenario correlation = "
            "(design effect - 1) / (runs per scenario - 1): give it to `scheduler validate "
            "--icc` to plan the next experiment",
            *clustered_notes(report),
        ],
        label_columns=2,
    )


def _clustered_row(c: ClusteredMean) -> list[str]:
    return [
        num(c.mean),
        f"{c.scenarios} / {c.runs}",
        num(c.se_independent),
        num(c.se_cr0),
        num(c.se),
        _interval(c.ci),
        num(c.design_effect, 2),
        num(c.icc),
    ]


def _interval(interval: Interval | NoInterval) -> str:
    if isinstance(interval, NoInterval):
        return NO_INTERVAL
    return f"[{num(interval.low)}, {num(interval.high)}]"


def clustered_notes(report: ExperimentReport) -> list[str]:
    """Why a clustered mean has no interval, once per reason, naming the means it holds
    for."""
    labelled = [
        (f"{tier_id} {measure}", c.ci)
        for tier_id, tier in report.tiers.items()
        for measure, c in (
            ("pass rate", tier.analysis.pass_rate_clustered),
            ("mean composite", tier.analysis.composite_mean_clustered),
        )
        if c is not None
    ]
    return _no_interval_notes("", labelled)


def _no_interval_notes(
    lead: str, labelled: Sequence[tuple[str, Interval | NoInterval | None]]
) -> list[str]:
    """What cannot be concluded, once per reason, and the figures it leaves without an
    interval."""
    reasons: dict[str, list[str]] = {}
    for label, ci in labelled:
        if isinstance(ci, NoInterval):
            reasons.setdefault(ci.not_reported, []).append(label)
    return [f"{lead}{why} (no interval for {', '.join(labels)})" for why, labels in reasons.items()]


def questions_table(report: ExperimentReport) -> Table:
    rows, sentences = [], []
    for tier_id, tier in report.tiers.items():
        c = tier.analysis.across_scenarios
        if c is not None:
            rows += _question_rows(tier_id, c)
            sentences += tier_sentences(report, tier_id, c)
    return _questions(
        f"Against the baseline ({report.cross_tier.baseline})",
        rows,
        sentences,
        report.multiplicity_across_scenarios,
    )


def comparison_questions_table(result: ExperimentComparison) -> Table | None:
    """`scheduler compare`: each tier of B against the same tier of A, scenario by
    scenario; None when no tier has two or more scenarios in both."""
    if not result.across_scenarios:
        return None
    rows, sentences = [], []
    for tier_id, c in result.across_scenarios.items():
        rows += _question_rows(tier_id, c)
        sentences += question_sentences(
            tier_id, c, result.scenarios.get(tier_id, {}), result.multiplicity_across_scenarios
        )
        sentences += _planning_sentence(tier_id, c)
    return _questions(
        f"B ({result.experiment.id}) against A ({result.reference.id})",
        rows,
        sentences,
        result.multiplicity_across_scenarios,
    )


def _question_rows(tier_id: str, c: ScenarioComparison) -> list[list[str]]:
    these, like = c.these_scenarios, c.like_these
    rate, composite = like.pass_rate, like.composite
    return [
        [
            tier_id,
            f"{THESE} ({these.scenarios})",
            f"{signed(these.risk_difference)} {bracket(these.risk_difference_ci)}",
            f"CMH {_p(these.cmh_p, these.cmh_p_adjusted)}",
            f"van Elteren z {signed(these.van_elteren_z)}",
            _p(these.van_elteren_p, these.van_elteren_p_adjusted),
            these.verdict.value,
        ],
        [
            tier_id,
            f"{LIKE_THESE} ({like.scenarios})",
            f"{signed(rate.mean)} {bracket(rate.ci)} SE {num(rate.se)}",
            _t_test(rate),
            f"{signed(composite.mean)} {bracket(composite.ci)} SE {num(composite.se)}",
            _t_test(composite),
            like.verdict.value,
        ],
    ]


def _questions(
    against: str, rows: list[list[str]], sentences: list[str], family: Multiplicity | None
) -> Table:
    return Table(
        f"{against} {THESE}, and {LIKE_THESE}",
        [
            "tier",
            "question (scenarios)",
            "Δ pass rate [95% CI]",
            "pass-rate test: p (adj.)",
            "Δ mean composite [95% CI] / test",
            "composite p (adj.)",
            "verdict",
        ],
        rows,
        [
            *sentences,
            f"{THESE}: the scenarios fixed, each tier compared with its reference within each "
            "scenario: Cochran-Mantel-Haenszel's test on passes, the Mantel-Haenszel common "
            "risk difference with Sato's variance, van Elteren's stratified rank-sum test on "
            "composite scores; the tier's verdict is this question's",
            f"{LIKE_THESE}: the scenarios as a sample of those one could write: the mean of "
            "the per-scenario differences of the means, Student t on n - 1 degrees of "
            f"freedom; fewer than {MIN_SCENARIOS_TO_GENERALISE} scenarios are too few to "
            "generalise from",
            _multiplicity_note(family),
        ],
        label_columns=2,
    )


# The section's figures in `report --format csv`, on tier rows (blank on the others).
CSV_COLUMNS = [
    "vs_baseline_verdict_from",
    "vs_baseline_pooled_verdict",
    *(
        f"{measure}_clustered_{figure}"
        for measure in ("pass_rate", "composite_mean")
        for figure in ("se", "ci_low", "ci_high")
    ),
    "these_scenarios_cmh_p",
    "these_scenarios_cmh_p_adjusted",
    "these_scenarios_van_elteren_p",
    "these_scenarios_van_elteren_p_adjusted",
    "these_scenarios_risk_difference",
    "these_scenarios_risk_difference_ci_low",
    "these_scenarios_risk_difference_ci_high",
    *(
        f"like_these_{measure}_{figure}"
        for measure in ("pass_rate", "composite")
        for figure in ("difference", "se", "ci_low", "ci_high", "p", "p_adjusted")
    ),
    "heterogeneity_p",
]


def csv_values(cell: TierReport, tier_row: bool) -> list[object]:
    """The CSV_COLUMNS of one row; None where the row has no such figure."""
    if not tier_row:
        return [None] * len(CSV_COLUMNS)
    a = cell.analysis
    vs, c = a.vs_baseline, a.across_scenarios
    values: list[object] = [None, None] if vs is None else [vs.verdict_from, vs.pooled_verdict]
    for clustered in (a.pass_rate_clustered, a.composite_mean_clustered):
        values += [None] * 3 if clustered is None else [clustered.se, *_bounds(clustered.ci)]
    if c is None:
        return values + [None] * (len(CSV_COLUMNS) - len(values))
    these, risk = c.these_scenarios, c.these_scenarios.risk_difference_ci
    values += [
        these.cmh_p,
        these.cmh_p_adjusted,
        these.van_elteren_p,
        these.van_elteren_p_adjusted,
        these.risk_difference,
        *_bounds(risk),
    ]
    for d in (c.like_these.pass_rate, c.like_these.composite):
        values += [d.mean, d.se, *_bounds(d.ci), d.p, d.p_adjusted]
    return [*values, c.heterogeneity.p]


def _bounds(ci: Interval | NoInterval | None) -> tuple[float | None, float | None]:
    """An interval's two columns, blank where it is not reported (the JSON says why)."""
    return (ci.low, ci.high) if isinstance(ci, Interval) else (None, None)


def compact_table(report: ExperimentReport) -> Table | None:
    """One row a tier: the section in short, for `--format github`; None when no tier has
    two or more scenarios."""
    rows = []
    for tier_id, tier in report.tiers.items():
        a = tier.analysis
        clustered, c = a.pass_rate_clustered, a.across_scenarios
        if clustered is None:
            continue
        shown = [tier_id, f"{num(clustered.mean)} SE {num(clustered.se)} {_interval(clustered.ci)}"]
        if c is None:
            rows.append(
                [*shown, "baseline" if tier_id == report.cross_tier.baseline else "-", "", "", ""]
            )
            continue
        these, rate = c.these_scenarios, c.like_these.pass_rate
        rows.append(
            [
                *shown,
                f"{signed(these.risk_difference)} {bracket(these.risk_difference_ci)} "
                f"({these.scenarios})",
                f"{_p(these.cmh_p, these.cmh_p_adjusted)} / "
                f"{_p(these.van_elteren_p, these.van_elteren_p_adjusted)}",
                f"{signed(rate.mean)} {bracket(rate.ci)} SE {num(rate.se)}",
                _t_test(rate, named=False),
            ]
        )
    if not rows:
        return None
    sentences = _no_interval_notes(
        "",
        [
            (f"{tier_id} pass rate", clustered.ci)
            for tier_id, tier in report.tiers.items()
            if (clustered := tier.analysis.pass_rate_clustered) is not None
        ],
    ) + [
        sentence
        for tier_id, tier in report.tiers.items()
        if (c := tier.analysis.across_scenarios) is not None
        for sentence in question_sentences(
            tier_id, c, _cells(report, tier_id), report.multiplicity_across_scenarios
        )
    ]
    return Table(
        f"Across scenarios: against {report.cross_tier.baseline} {THESE} and {LIKE_THESE}",
        [
            "tier",
            f"pass rate, clustered SE [{CONFIDENCE:.0%} CI]",
            f"{THESE}: Δ pass rate [95% CI] (scenarios)",
            "CMH p (adj.) / van Elteren p (adj.)",
            f"{LIKE_THESE}: Δ pass rate [95% CI]",
            "paired t p (adj.)",
        ],
        rows,
        [*sentences, _multiplicity_note(report.multiplicity_across_scenarios)],
    )


def difference(d: float | None) -> str:
    """A planned detectable difference of pass rates, in points; above 100 points (the
    whole range) none is, and the words say so rather than a ratio."""
    if d is None:
        return "-"
    if d > 1:
        # Rounded up: just over 100 points must not read as 100.
        return (
            f"none (the smallest it could detect, {math.ceil(d * 100)} points, is more than "
            "the 100 pass rates span)"
        )
    return f"a difference of {points(d)} or more"


def _p(p: float, adjusted: float | None) -> str:
    return f"{p_value(p)} ({p_value(adjusted)})"


def _t_test(d: PairedDifference, *, named: bool = True) -> str:
    """The paired t test's p (adjusted), or why there is none: with every scenario's
    difference the same, the SE is 0 and the test's p of 0 or 1 says nothing."""
    if d.t is None:
        return "no test: SE 0"
    return f"t({d.df}) {_p(d.p, d.p_adjusted)}" if named else _p(d.p, d.p_adjusted)


def _multiplicity_note(m: Multiplicity | None) -> str:
    if m is None or m.correction == "none":
        return "p-values not corrected for multiple comparisons"
    return (
        f"p adj.: {corrected_across(m, ACROSS_SCENARIOS)} (four per tier), a family apart "
        f"from the run-level tests, at {m.alpha:g}"
    )


def tier_sentences(report: ExperimentReport, tier_id: str, c: ScenarioComparison) -> list[str]:
    """What a reader should take from one tier's row pair, in words."""
    these = c.these_scenarios
    return [
        f"{tier_id}: CMH χ² {num(these.cmh, 2)}, p {p_value(these.cmh_p)} "
        f"({p_value(these.cmh_p_continuity)} with continuity correction)",
        *question_sentences(
            tier_id, c, _cells(report, tier_id), report.multiplicity_across_scenarios
        ),
        *_planning_sentence(tier_id, c),
    ]


def question_sentences(
    tier_id: str,
    c: ScenarioComparison,
    cells: Mapping[str, Comparison | None],
    family: Multiplicity | None,
) -> list[str]:
    """Where the two questions disagree, the scenarios are too few, the effect differs
    from scenario to scenario, or a scenario went the other way (`cells`: the tier's
    scenario rows' tests)."""
    these, like, h = c.these_scenarios, c.like_these, c.heterogeneity
    n = these.scenarios
    sentences = _no_interval_notes(
        f"{tier_id}: ",
        [
            (f"Δ pass rate {THESE}", these.risk_difference_ci),
            (f"Δ pass rate {LIKE_THESE}", like.pass_rate.ci),
            (f"Δ mean composite {LIKE_THESE}", like.composite.ci),
        ],
    )
    # Too few for an interval is said above, and says more than too few to generalise.
    too_few = like.too_few_scenarios and n >= MIN_SCENARIOS_FOR_INTERVAL
    if these.verdict is not like.verdict:
        if these.verdict in (Verdict.better, Verdict.worse) and like.verdict in (
            Verdict.no_difference,
            Verdict.too_few_scenarios,
        ):
            why = (
                too_few_for_interval(n)
                if n < MIN_SCENARIOS_FOR_INTERVAL
                else f"{n} scenarios are too few to generalise from"
                if too_few
                else f"paired t, p adj. {p_value(like.pass_rate.p_adjusted)}"
            )
            sentences.append(
                f"{tier_id}: {these.verdict.value} on these {n} scenarios; not shown to carry "
                f"over to others ({LIKE_THESE}): {why}"
            )
        else:
            sentences.append(
                f"{tier_id}: {these.verdict.value} {THESE} ({n}); {like.verdict.value} {LIKE_THESE}"
            )
    elif too_few:
        sentences.append(f"{tier_id}: {n} scenarios are too few to generalise from, {LIKE_THESE}")
    if h.p is not None and h.p < (ALPHA if family is None else family.alpha):
        sentences.append(
            f"{tier_id}: its effect on the pass rate differs from scenario to scenario "
            f"({h.test} χ² {num(h.statistic, 2)} on {h.df} df, p {p_value(h.p)})"
        )
    if these.verdict in (Verdict.better, Verdict.worse) and h.opposite:
        other = "worse" if these.verdict is Verdict.better else "better"
        named = ", ".join(
            _scenario_rates(s, cells.get(s), significant=s in h.significant_opposite)
            for s in h.opposite
        )
        sentences.append(
            f"{tier_id}: {these.verdict.value} {THESE} overall, but {other} on {named}"
        )
    return sentences


def _planning_sentence(tier_id: str, c: ScenarioComparison) -> list[str]:
    plan = c.planning
    if plan is None:
        return []
    alone = runs_alone(plan.scenarios)
    more_runs = (
        f", with unlimited runs {difference(plan.like_these_limit)}"
        if alone is None
        else f"; {alone}; more scenarios can: "
        f"{scenarios_would(plan.runs, plan.icc, plan.alpha)} would detect "
        f"{points(PLANNING_TARGET)} at this correlation"
    )
    return [
        f"{tier_id}: planning, at the intra-scenario correlation observed "
        f"({num(plan.icc, 2)}), the smallest difference in pass rate "
        f"{plural(plan.scenarios, 'scenario')} x {plural(plan.runs, 'run')} detect "
        f"({plan.power:.0%} power at "
        f"{plan.alpha:.3g}): {THESE} {difference(plan.these_scenarios)}; {LIKE_THESE} "
        f"{difference(plan.like_these)}, with twice the scenarios "
        f"{difference(plan.like_these_twice_the_scenarios)}, with twice the runs "
        f"{difference(plan.like_these_twice_the_runs)}{more_runs}"
    ]


def runs_alone(scenarios: int) -> str | None:
    """Why, with fewer scenarios than it takes to generalise, no number of runs per
    scenario can be promised to detect a difference on scenarios like these; None with
    enough of them. The planning's limit with unlimited runs rests on how much the
    scenarios differ, which a handful cannot measure: measured near 0 on two, it
    would promise any difference at all."""
    if scenarios >= MIN_SCENARIOS_TO_GENERALISE:
        return None
    return (
        "more runs alone cannot be counted on to detect less: how much scenarios differ "
        "from one another bounds what more runs per scenario can detect, and "
        f"{scenarios} scenarios cannot measure it"
    )


def scenarios_would(runs: int, icc: float, level: float) -> str:
    """How many scenarios, each with `runs` runs, detect PLANNING_TARGET on scenarios
    like these at intra-scenario correlation `icc`, a test at `level`."""
    more = scenarios_to_detect(PLANNING_TARGET, runs, icc, level)
    return (
        f"more than {MOST_PLANNED} scenarios"
        if more is None
        else f"{plural(more, 'scenario')} x {plural(runs, 'run')}"
    )


def _scenario_rates(scenario: str, cell: Comparison | None, significant: bool) -> str:
    rates = ""
    if cell is not None and cell.pass_rate is not None and cell.reference_pass_rate is not None:
        rates = f" ({num(cell.pass_rate)} against {num(cell.reference_pass_rate)})"
    judged = "significantly, by its own test" if significant else "not significant alone"
    return f"{scenario}{rates}, {judged}"


def _cells(report: ExperimentReport, tier_id: str) -> dict[str, Comparison | None]:
    return {s: cell.analysis.vs_baseline for s, cell in report.tiers[tier_id].scenarios.items()}
