"""The tests of each tier against a reference, and their verdicts: the significance
table, its columns (which compare shows too) and the notes on how the p-values were
corrected and what the runs could not have detected."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from core.analysis.comparison import ALPHA, POWER, test_directions
from core.analysis.group import BOOTSTRAP_RESAMPLES
from core.analysis.scenarios import stratified_directions
from core.analysis.verdicts import direction
from core.results.report import (
    Comparison,
    Detectable,
    ExperimentComparison,
    ExperimentReport,
    Interval,
    Multiplicity,
    NoInterval,
    TierAnalysis,
    TierReport,
    Verdict,
)
from core.wording import plural
from scheduler.report.formatting import (
    PASS_RATE,
    Table,
    bracket,
    cells,
    p_value,
    pass_rate,
    points,
    signed,
    signed_interval,
    with_interval,
)

CORRECTION_NAMES = {"holm": "Holm", "bh": "Benjamini-Hochberg", "none": "no correction"}


# A report's two families of tests, each corrected apart: a count given without its
# family's name reads as the other's (8 in a headline, 12 in a note, of one report).
RUN_LEVEL = "run-level"
ACROSS_SCENARIOS = "across-scenario"


def corrected_across(m: Multiplicity, family: str) -> str:
    """How a family's p-values were corrected, its tests counted and named: the one
    wording of every count of tests, in every format."""
    tests = plural(m.tests, f"{family} test")
    if m.correction == "none":
        return f"not corrected across the {tests}"
    return f"{CORRECTION_NAMES[m.correction]}-corrected across the {tests}"


def multiplicity_note(m: Multiplicity | None) -> str:
    """How the p-values were corrected and what the verdicts are read from."""
    if m is None:
        return (
            f"verdicts at alpha {ALPHA:g} per test, not corrected for multiple comparisons "
            "(a report stored before corrections: `--correction holm` corrects it)"
        )
    if m.tests == 0:  # a note on correcting zero tests reads as an error
        return "no tier beside the baseline has runs to compare with it: no test, no verdict"
    if m.correction == "none":
        return (
            f"verdicts at alpha {m.alpha:g} per test, {corrected_across(m, RUN_LEVEL)} "
            "(some raw p-values fall under alpha by chance)"
        )
    guards = "false discovery rate" if m.correction == "bh" else "family-wise error rate"
    return (
        f"p adj.: {corrected_across(m, RUN_LEVEL)} ({guards} {m.alpha:g}); verdicts come "
        "from the adjusted p-values"
    )


def detectable_note(m: Multiplicity | None) -> str:
    level = ALPHA if m is None else m.lone_test_alpha
    return (
        f"could detect: the smallest rise / fall of the pass rate from the reference's "
        f"rate, in points (0.10 of pass rate is 10 points), that these runs detect with "
        f"{POWER:.0%} power (normal approximation, two-sided, "
        f"at {level:.4g}, the level one test must reach alone); a smaller difference may "
        "exist and go unseen"
    )


def verdict(c: Comparison) -> str:
    """The verdict, with the tests it came from when not the row's own; "no significant
    difference" from the row's own tests says what the runs could not have seen (the
    stratified tests' planning says it for theirs)."""
    if c.verdict_from is not None:
        return f"{c.verdict.value} ({c.verdict_from})"
    if c.verdict is not Verdict.no_difference or c.detectable is None:
        return c.verdict.value
    return f"{c.verdict.value} ({undetectable(c.detectable)})"


class Difference(NamedTuple):
    """A tier's difference in pass rate from the baseline, as its verdict's tests take it,
    and what its verdict was read from (`read_from`, the measures whose test was
    significant: empty when none was)."""

    value: float | None
    interval: Interval | NoInterval | None
    basis: str
    verdict: Verdict
    read_from: tuple[str, ...]
    # Each measure's test and adjusted p, named in words: "CMH p adj. 0.469".
    tests: Mapping[str, str]


# The two measures a verdict is read from, each by a test of its own.
PASS_RATE_MEASURE = "pass rate"
COMPOSITE_MEASURE = "composite score"


def verdict_difference(tier: TierReport) -> Difference | None:
    """The difference in pass rate the tier's verdict tests, with its interval: the
    Mantel-Haenszel common risk difference on these scenarios when the stratified
    tests gave the verdict, else the difference over the runs; and which of the two
    measures (pass rate, composite score) the verdict was read from. None for the
    baseline."""
    vs = tier.analysis.vs_baseline
    if vs is None:
        return None
    across = tier.analysis.across_scenarios
    if vs.verdict_from is not None and across is not None:
        these = across.these_scenarios
        tested = {
            PASS_RATE_MEASURE: ("CMH", these.risk_difference, these.cmh_p_adjusted),
            COMPOSITE_MEASURE: ("van Elteren", these.van_elteren_z, these.van_elteren_p_adjusted),
        }
        found = (
            these.risk_difference,
            these.risk_difference_ci,
            f"{ACROSS_SCENARIOS}: Mantel-Haenszel risk difference on these {these.scenarios} "
            "scenarios (Sato's interval)",
        )
    else:
        superior = None if vs.prob_superior is None else vs.prob_superior - 0.5
        tested = {
            PASS_RATE_MEASURE: ("Fisher", vs.pass_rate_delta, vs.fisher_p_adjusted),
            COMPOSITE_MEASURE: ("Mann-Whitney", superior, vs.mann_whitney_p_adjusted),
        }
        found = (
            vs.pass_rate_delta,
            vs.risk_difference_ci,
            f"{RUN_LEVEL}: over the runs (Newcombe's hybrid score interval)",
        )
    read_from = tuple(
        measure
        for measure, (_, effect, p) in tested.items()
        if effect is not None and p is not None and direction(effect, p, vs.alpha)
    )
    tests = {measure: f"{test} p adj. {p_value(p)}" for measure, (test, _, p) in tested.items()}
    return Difference(*found, vs.verdict, read_from, tests)


def unmatched_notes(result: ExperimentComparison) -> list[str]:
    """What of either experiment the comparison left out, and why."""
    notes = []
    if result.unmatched_tiers:
        notes.append("tiers in only one experiment: " + ", ".join(result.unmatched_tiers))
    if result.unmatched_scenarios:
        sides = {result.reference.id: "A", result.experiment.id: "B"}
        notes.append(
            "scenarios in only one experiment, left out of every row (a tier's included): "
            + "; ".join(
                f"{sides.get(exp_id, exp_id)} only: {', '.join(only)}"
                for exp_id, only in result.unmatched_scenarios.items()
            )
        )
    return notes


def stratified_note(tiers: Mapping[str, Comparison | None]) -> list[str]:
    """Which tier rows the stratified tests judge, and where the pooled tests would say
    otherwise."""
    decided = {tier_id: vs for tier_id, vs in tiers.items() if vs is not None and vs.verdict_from}
    if not decided:
        return []
    notes = [
        "a tier with two or more scenarios takes its verdict from the tests stratified by "
        "scenario (CMH on passes, van Elteren on composite scores; the section on these "
        "scenarios has them, corrected as a family of their own); its Fisher and "
        "Mann-Whitney figures are over the pooled runs"
    ]
    notes += [
        f"{tier_id}: {vs.verdict.value} ({vs.verdict_from}); pooled over its runs, Fisher "
        f"and Mann-Whitney say {vs.pooled_verdict.value}"
        for tier_id, vs in decided.items()
        if vs.pooled_verdict is not None and vs.pooled_verdict is not vs.verdict
    ]
    return notes


def one_test_only(tier_id: str, analysis: TierAnalysis) -> str | None:
    """A note for a verdict that its two tests did not both give (either one decides):
    "better" beside pass rates that did not differ reads as a mistake unless it says
    the composite scores did. None where both agree or there is no verdict."""
    vs = analysis.vs_baseline
    if vs is None or vs.verdict not in (Verdict.better, Verdict.worse, Verdict.mixed):
        return None
    across = analysis.across_scenarios
    if vs.verdict_from is not None and across is not None:
        these = across.these_scenarios
        passes, scores = stratified_directions(
            these,
            _p(these.cmh_p_adjusted, these.cmh_p),
            _p(these.van_elteren_p_adjusted, these.van_elteren_p),
            vs.alpha,
        )
    else:
        passes, scores = test_directions(
            vs,
            _p(vs.fisher_p_adjusted, vs.fisher_p),
            _p(vs.mann_whitney_p_adjusted, vs.mann_whitney_p),
            vs.alpha,
        )
    if passes == scores:
        return None
    said = {1: "better", -1: "worse", 0: "no significant difference"}
    return (
        f"{tier_id} ({vs.verdict.value}): pass rate {said[passes]}, composite scores {said[scores]}"
    )


def _p(adjusted: float | None, raw: float | None) -> float:
    return 1.0 if (found := adjusted if adjusted is not None else raw) is None else found


def undetectable(d: Detectable) -> str:
    """What difference of the pass rate the runs could detect, in points, each way."""
    rise = None if d.improvement is None else points(d.improvement)
    fall = None if d.regression is None else points(d.regression)
    if rise is not None and fall is not None:
        return f"could detect a rise of {rise} or more in pass rate, or a fall of {fall} or more"
    if rise is not None:
        return f"could detect a rise of {rise} or more in pass rate; not a fall"
    if fall is not None:
        return f"could detect a fall of {fall} or more in pass rate; not a rise"
    return "could detect no rise and no fall in pass rate: too few runs"


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


def versus(c: Comparison) -> list[str]:
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
                *(versus(vs) if vs is not None else ["baseline"] + [""] * (len(TEST_COLUMNS) - 1)),
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
            *(
                stratified_note({t: r.analysis.vs_baseline for t, r in report.tiers.items()})
                if scenario is None
                else []
            ),
        ],
        label_columns=2,
        # The composite's medians; its test, effect size and every p-value stay.
        narrow_drop=("median composite [95% CI]", "Δ median composite"),
        words=("verdict",),
    )
