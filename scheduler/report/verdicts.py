"""The tests of each tier against a reference, and their verdicts: the significance
table, its columns (which compare shows too) and the notes on how the p-values were
corrected and what the runs could not have detected."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


def corrected_family(m: Multiplicity | None, family: str) -> str:
    """A family's correction with what it guards at which level: "Holm-corrected across
    the 8 across-scenario tests (family-wise error rate 0.05)"."""
    if m is None:
        return f"the {family} tests not corrected for multiple comparisons"
    if m.correction == "none":
        return f"{corrected_across(m, family)} (alpha {m.alpha:g} per test)"
    guards = "false discovery rate" if m.correction == "bh" else "family-wise error rate"
    return f"{corrected_across(m, family)} ({guards} {m.alpha:g})"


# The tests a tier's verdict comes from when it has two or more scenarios.
STRATIFIED_TESTS = "CMH and van Elteren on their scenarios"


def multiplicity_note(
    m: Multiplicity | None,
    across: Multiplicity | None = None,
    stratified: Sequence[str] = (),
    *,
    others: bool = True,
) -> str:
    """How the p-values were corrected and which family each verdict is read from: the
    run-level tests', or for the `stratified` tiers (two or more scenarios) those of
    the family across scenarios (`across`). `others`: whether the table has rows whose
    verdict is run-level (a scenario row, a tier of one scenario); a table of tier rows
    alone, each judged across its scenarios, names only that family."""
    if stratified:
        tiers = ", ".join(stratified)
        if not others:
            return (
                "verdicts come from CMH and van Elteren on each tier's scenarios, "
                f"{corrected_family(across, ACROSS_SCENARIOS)}"
            )
        run_level = (
            corrected_family(m, RUN_LEVEL) if m is not None and m.tests else "no run-level test"
        )
        return (
            f"p adj.: {run_level}; verdicts come from these p-values, except those of "
            f"{tiers}: from {STRATIFIED_TESTS}, {corrected_family(across, ACROSS_SCENARIOS)}"
        )
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
    return f"p adj.: {corrected_family(m, RUN_LEVEL)}; verdicts come from the adjusted p-values"


def stratified_tiers(tiers: Mapping[str, Comparison | None]) -> list[str]:
    """The tiers whose verdict comes from the tests across their scenarios."""
    return [t for t, vs in tiers.items() if vs is not None and vs.verdict_from is not None]


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


class Tested(NamedTuple):
    """One test a verdict is read from: its name, raw and adjusted p."""

    name: str
    p: float | None
    adjusted: float | None

    def __str__(self) -> str:
        return f"{self.name} (p {p_value(self.p)}, adj. {p_value(self.adjusted)})"


class Difference(NamedTuple):
    """A tier's difference in pass rate from the baseline, as its verdict's tests take it,
    and what its verdict was read from (`read_from`, the measures whose test was
    significant: empty when none was)."""

    value: float | None
    interval: Interval | NoInterval | None
    basis: str
    verdict: Verdict
    read_from: tuple[str, ...]
    # Each measure's test, by measure.
    tests: Mapping[str, Tested]
    # The family its verdict's p-values were corrected in, in words.
    family: str


# The two measures a verdict is read from, each by a test of its own.
PASS_RATE_MEASURE = "pass rate"
COMPOSITE_MEASURE = "composite score"


def verdict_difference(
    tier: TierReport, run_level: Multiplicity | None, across: Multiplicity | None
) -> Difference | None:
    """The difference in pass rate the tier's verdict tests, with its interval: the
    Mantel-Haenszel common risk difference on these scenarios when the stratified
    tests gave the verdict (their family: `across`), else the difference over the runs
    (`run_level`); and which of the two measures (pass rate, composite score) the
    verdict was read from. None for the baseline."""
    vs = tier.analysis.vs_baseline
    if vs is None:
        return None
    stratified = tier.analysis.across_scenarios
    if vs.verdict_from is not None and stratified is not None:
        these = stratified.these_scenarios
        # Each measure's test: its name, its effect's sign, raw and adjusted p.
        tested: dict[str, tuple[str, float | None, float | None, float | None]] = {
            PASS_RATE_MEASURE: ("CMH", these.risk_difference, these.cmh_p, these.cmh_p_adjusted),
            COMPOSITE_MEASURE: (
                "van Elteren",
                these.van_elteren_z,
                these.van_elteren_p,
                these.van_elteren_p_adjusted,
            ),
        }
        found = (
            these.risk_difference,
            these.risk_difference_ci,
            f"{ACROSS_SCENARIOS}: Mantel-Haenszel risk difference on these {these.scenarios} "
            "scenarios (Sato's interval)",
        )
        family = corrected_family(across, ACROSS_SCENARIOS)
    else:
        superior = None if vs.prob_superior is None else vs.prob_superior - 0.5
        tested = {
            PASS_RATE_MEASURE: ("Fisher", vs.pass_rate_delta, vs.fisher_p, vs.fisher_p_adjusted),
            COMPOSITE_MEASURE: (
                "Mann-Whitney",
                superior,
                vs.mann_whitney_p,
                vs.mann_whitney_p_adjusted,
            ),
        }
        found = (
            vs.pass_rate_delta,
            vs.risk_difference_ci,
            f"{RUN_LEVEL}: over the runs (Newcombe's hybrid score interval)",
        )
        family = corrected_family(run_level, RUN_LEVEL)
    read_from = tuple(
        measure
        for measure, (_, effect, _, p) in tested.items()
        if effect is not None and p is not None and direction(effect, p, vs.alpha)
    )
    tests = {measure: Tested(test, raw, p) for measure, (test, _, raw, p) in tested.items()}
    return Difference(*found, vs.verdict, read_from, tests, family)


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


def test_notes(
    m: Multiplicity | None, across: Multiplicity | None = None, stratified: Sequence[str] = ()
) -> list[str]:
    """The notes under a table of tests: `stratified`, the tiers judged across their
    scenarios instead (their family: `across`)."""
    return [
        "Fisher's exact test (two-sided) on passes; Mann-Whitney U (two-sided) on composite scores",
        "effect sizes: Δ pass rate with Newcombe's hybrid score interval; Cliff's δ = "
        "P(a run here scores above a reference run) - P(below), its interval from Cliff's "
        "consistent variance estimator (Feng & Cliff's asymmetric form)",
        UNADJUSTED_INTERVALS,
        multiplicity_note(m, across, stratified),
        detectable_note(m),
    ]


# Beside a verdict read from corrected p-values, an interval that leaves out 0 reads as
# a contradiction unless it says what it is.
UNADJUSTED_INTERVALS = (
    "the intervals are 95% each, not adjusted for multiple tests, and not the tests' own "
    "(Newcombe's and Cliff's are approximations; Fisher's test is exact): one may leave out "
    "0 beside a p-value above alpha; a verdict is read from the adjusted p-values, never "
    "from an interval"
)


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
            *test_notes(
                report.multiplicity,
                report.multiplicity_across_scenarios,
                stratified_tiers({t: r.analysis.vs_baseline for t, r in report.tiers.items()})
                if scenario is None
                else [],
            ),
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
