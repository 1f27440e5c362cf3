"""Is one group of runs significantly different from another?

The same two tests answer it everywhere: each tier against the baseline tier
in a report, and each tier (x scenario) of an experiment against an earlier
experiment in `scheduler compare`. Passes: two-sided Fisher's exact test.
Composite scores: two-sided Mann-Whitney U test, its direction read from
U / (n*m), the chance that a run here scores above a reference run.

Beside each test, its effect size with an interval: the risk difference of
the pass rates (Newcombe) and Cliff's delta of the composite scores.

With many tiers and scenarios some raw p-values fall under alpha by chance,
so every test of a report (or of a comparison) is one family: its p-values
are adjusted together (Holm by default, Benjamini-Hochberg or none on
request) and verdicts come from the adjusted ones. A tier with one scenario
tests the same runs in its tier row and its scenario row: that test counts
once. Per comparison, the smallest pass-rate change its runs could detect
at 80% power says what "no significant difference" rules out.

A tier row with two or more scenarios takes its verdict from the stratified
tests instead (core.analysis.scenarios, "on these scenarios"); its Fisher and
Mann-Whitney figures stay, over the pooled runs, with their own verdict beside.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.analysis.columns import Group
from core.analysis.ordering import ordered_ids
from core.analysis.scenarios import (
    across_scenarios,
    clustered,
    correct_across,
    correct_comparisons,
    decided,
    observed_icc,
    planned,
)
from core.analysis.verdicts import direction, verdict_of
from core.results.report import (
    Comparison,
    Detectable,
    ExperimentComparison,
    ExperimentInfo,
    ExperimentReport,
    Interval,
    Multiplicity,
    ScenarioComparison,
    TierReport,
    Verdict,
)
from core.results.run import RunResult
from core.stats.choices import DEFAULT_ALPHA, DEFAULT_CORRECTION, Correction
from core.stats.descriptive import statistics
from core.stats.significance import (
    adjust_p,
    cliffs_delta,
    detectable_difference,
    fisher_exact,
    lone_test_alpha,
    mann_whitney_u,
    risk_difference_interval,
)

ALPHA = DEFAULT_ALPHA
CORRECTION = DEFAULT_CORRECTION
CONFIDENCE = 0.95
POWER = 0.8
_NEWCOMBE = f"Newcombe hybrid score, {CONFIDENCE:.0%}"
_CLIFF = f"Cliff consistent variance, Feng-Cliff asymmetric, {CONFIDENCE:.0%}"


def compare(
    runs: Group,
    reference_runs: Group,
    reference: str,
    alpha: float = ALPHA,
) -> Comparison:
    """`runs` against `reference_runs`; infrastructure errors are left out of both."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be within (0, 1), got {alpha}")
    valid = runs.counted
    base = reference_runs.counted
    passes = sum(valid.column("passed"))
    base_passes = sum(base.column("passed"))
    counts = Comparison(
        reference=reference,
        runs=len(valid),
        passes=passes,
        reference_runs=len(base),
        reference_passes=base_passes,
        alpha=alpha,
        verdict=Verdict.not_enough_runs,
    )
    if not valid or not base:
        return counts
    pass_rate, base_rate = passes / len(valid), base_passes / len(base)
    fisher_p = fisher_exact(passes, len(valid) - passes, base_passes, len(base) - base_passes)
    composites = valid.column("composite_score")
    base_composites = base.column("composite_score")
    test = mann_whitney_u(composites, base_composites)
    prob_superior = test.u / (len(valid) * len(base))
    risk = risk_difference_interval(passes, len(valid), base_passes, len(base), CONFIDENCE)
    cliff = cliffs_delta(composites, base_composites, CONFIDENCE)
    median = statistics(composites).median
    base_median = statistics(base_composites).median
    assert median is not None and base_median is not None  # both samples are non-empty
    tested = counts.model_copy(
        update={
            "pass_rate": pass_rate,
            "reference_pass_rate": base_rate,
            "pass_rate_delta": pass_rate - base_rate,
            "fisher_p": fisher_p,
            "composite_median": median,
            "reference_composite_median": base_median,
            "composite_median_delta": median - base_median,
            "mann_whitney_u": test.u,
            "mann_whitney_p": test.p,
            "mann_whitney_method": test.method,
            "prob_superior": prob_superior,
            "risk_difference_ci": Interval(
                low=risk[0], high=risk[1], confidence=CONFIDENCE, method=_NEWCOMBE
            ),
            "cliffs_delta": cliff.delta,
            "cliffs_delta_ci": None
            if cliff.low is None or cliff.high is None
            else Interval(low=cliff.low, high=cliff.high, confidence=CONFIDENCE, method=_CLIFF),
        }
    )
    # Judged alone until a family corrects it (correct_family).
    return _judged(tested, fisher_p, test.p, alpha, alpha)


def test_directions(
    c: Comparison, fisher_p: float, mann_whitney_p: float, alpha: float
) -> tuple[int, int]:
    """What each of `c`'s two tests says at `alpha` with these p-values: passes
    (Fisher), composite scores (Mann-Whitney, read from U / (n*m)); +1, -1 or 0."""
    superior = 0.0 if c.prob_superior is None else c.prob_superior - 0.5
    return (
        direction(c.pass_rate_delta or 0.0, fisher_p, alpha),
        direction(superior, mann_whitney_p, alpha),
    )


def _judged(
    c: Comparison, fisher_p: float, mann_whitney_p: float, alpha: float, lone_alpha: float
) -> Comparison:
    """`c` with these (adjusted) p-values, the verdict they give at `alpha` and the
    differences detectable at `lone_alpha`."""
    assert c.pass_rate_delta is not None and c.prob_superior is not None
    return c.model_copy(
        update={
            "alpha": alpha,
            "fisher_p_adjusted": fisher_p,
            "mann_whitney_p_adjusted": mann_whitney_p,
            "detectable": _detectable(c, lone_alpha),
            "verdict": verdict_of(set(test_directions(c, fisher_p, mann_whitney_p, alpha))),
            # A tier row's stratified verdict is laid over this one again (correct_across).
            "verdict_from": None,
            "pooled_verdict": None,
        }
    )


def _detectable(c: Comparison, alpha: float) -> Detectable | None:
    """The normal approximation's detectable changes, except where Fisher's test could not
    reach `alpha` even with every run passing (or failing): with a handful of runs the
    approximation promises what the exact test cannot give."""
    if not c.runs or not c.reference_runs:
        return None
    rate = c.reference_passes / c.reference_runs
    base_fails = c.reference_runs - c.reference_passes

    def reachable(passes: int) -> bool:
        return fisher_exact(passes, c.runs - passes, c.reference_passes, base_fails) < alpha

    return Detectable(
        improvement=detectable_difference(rate, c.reference_runs, c.runs, alpha, POWER, 1)
        if reachable(c.runs)
        else None,
        regression=detectable_difference(rate, c.reference_runs, c.runs, alpha, POWER, -1)
        if reachable(0)
        else None,
        power=POWER,
        alpha=alpha,
    )


def correct_family(
    family: Sequence[Comparison], correction: Correction, alpha: float
) -> tuple[list[Comparison], Multiplicity]:
    """The comparisons with their p-values adjusted as one family (two tests each that has
    runs), verdicts and detectable differences redone at the corrected levels."""
    raw = [
        p
        for c in family
        if c.fisher_p is not None and c.mann_whitney_p is not None
        for p in (c.fisher_p, c.mann_whitney_p)
    ]
    adjusted = adjust_p(raw, correction)
    multiplicity = Multiplicity(
        correction=correction,
        alpha=alpha,
        tests=len(adjusted),
        lone_test_alpha=lone_test_alpha(alpha, correction, len(adjusted)),
    )
    pairs = iter(zip(adjusted[::2], adjusted[1::2], strict=True))
    result = [
        _judged(c, *next(pairs), alpha, multiplicity.lone_test_alpha)
        if c.fisher_p is not None
        else c.model_copy(update={"alpha": alpha})
        for c in family
    ]
    return result, multiplicity


Row = tuple[str, str | None]  # (tier, scenario); None: the tier's row


def correct_rows(
    rows: dict[Row, Comparison], correction: Correction, alpha: float
) -> tuple[dict[Row, Comparison], Multiplicity]:
    """The rows' tests as one family. A scenario row holding all of its tier's runs on both
    sides (a tier with one scenario) tests the same runs as the tier row: it counts once
    and gets the tier row's result."""

    def same_as_tier(row: Row) -> bool:
        tier = rows.get((row[0], None))
        cell = rows[row]
        return (
            row[1] is not None
            and tier is not None
            and (cell.runs, cell.reference_runs) == (tier.runs, tier.reference_runs)
        )

    family = [row for row in rows if not same_as_tier(row)]
    corrected, multiplicity = correct_family([rows[r] for r in family], correction, alpha)
    done = dict(zip(family, corrected, strict=True))
    return {row: done.get(row) or done[row[0], None] for row in rows}, multiplicity


def correct_report(
    report: ExperimentReport, correction: Correction = CORRECTION, alpha: float = ALPHA
) -> ExperimentReport:
    """Every test of the report against the baseline, corrected as one family, and the
    tests across scenarios as a family of their own (core.analysis.scenarios). Works on a
    stored report: its raw p-values are all it needs."""
    rows: dict[Row, Comparison] = {}
    for tier_id, tier in report.tiers.items():
        for scenario_id, cell in [(None, tier), *tier.scenarios.items()]:
            if cell.analysis.vs_baseline is not None:
                rows[tier_id, scenario_id] = cell.analysis.vs_baseline
    done, multiplicity = correct_rows(rows, correction, alpha)

    def fixed(row: Row, cell: TierReport) -> TierReport:
        if row not in done:
            return cell
        analysis = cell.analysis.model_copy(update={"vs_baseline": done[row]})
        return cell.model_copy(update={"analysis": analysis})

    tiers = {
        tier_id: fixed((tier_id, None), tier).model_copy(
            update={
                "scenarios": {
                    scenario_id: fixed((tier_id, scenario_id), cell)
                    for scenario_id, cell in tier.scenarios.items()
                }
            }
        )
        for tier_id, tier in report.tiers.items()
    }
    tiers, across = correct_across(tiers, correction, alpha)
    return report.model_copy(
        update={
            "tiers": tiers,
            "multiplicity": multiplicity,
            "multiplicity_across_scenarios": across,
        }
    )


def compare_experiments(
    reference: ExperimentInfo,
    reference_runs: Sequence[RunResult],
    experiment: ExperimentInfo,
    runs: Sequence[RunResult],
    alpha: float = ALPHA,
    correction: Correction = CORRECTION,
) -> ExperimentComparison:
    """Every tier and tier x scenario the two experiments share, B (`experiment`) against A,
    on the runs of the scenarios they share, all of them one family of tests; a tier
    with two or more scenarios in both is also compared across them (a family of its
    own), and takes its verdict on these scenarios; its planning is at the mean of B's
    tier's and A's tier's implied correlation.

    A tier regressed when either test that judges it finds it significantly
    worse after the correction (verdict worse or mixed): a CI gate should stop
    on any significant loss, and only on one that survives the correction.
    """
    tiers_b = ordered_ids(experiment.tiers, (r.tier for r in runs))
    tiers_a = ordered_ids(reference.tiers, (r.tier for r in reference_runs))
    scenarios_a = ordered_ids(reference.scenarios, (r.scenario for r in reference_runs))
    scenarios_b = ordered_ids(experiment.scenarios, (r.scenario for r in runs))
    scenarios = [s for s in scenarios_b if s in scenarios_a]
    # A tier's row too: a scenario only B ran would be counted as B's tier changing.
    runs = [r for r in runs if r.scenario in scenarios]
    reference_runs = [r for r in reference_runs if r.scenario in scenarios]
    groups, reference_groups = Group.of(runs).split("tier"), Group.of(reference_runs).split("tier")
    by_tier: dict[str, Comparison] = {}
    by_scenario: dict[str, dict[str, Comparison]] = {}
    for tier in (t for t in tiers_b if t in tiers_a):
        mine, theirs = groups.get(tier, Group()), reference_groups.get(tier, Group())
        by_tier[tier] = compare(mine, theirs, reference.id, alpha)
        cells, reference_cells = mine.split("scenario"), theirs.split("scenario")
        by_scenario[tier] = {
            scenario: compare(
                cells.get(scenario, Group()),
                reference_cells.get(scenario, Group()),
                reference.id,
                alpha,
            )
            for scenario in scenarios
        }
    rows: dict[Row, Comparison] = {(t, None): c for t, c in by_tier.items()}
    rows |= {(t, s): c for t, cells in by_scenario.items() for s, c in cells.items()}
    done, multiplicity = correct_rows(rows, correction, alpha)
    by_tier = {t: done[t, None] for t in by_tier}
    by_scenario = {t: {s: done[t, s] for s in cells} for t, cells in by_scenario.items()}
    pairs = {t: (groups.get(t, Group()), reference_groups.get(t, Group())) for t in by_tier}
    across, across_multiplicity = _across(pairs, reference.id, by_scenario, correction, alpha)
    by_tier = {t: decided(c, across[t]) if t in across else c for t, c in by_tier.items()}
    return ExperimentComparison(
        reference=reference,
        experiment=experiment,
        alpha=alpha,
        multiplicity=multiplicity,
        tiers=by_tier,
        scenarios=by_scenario,
        across_scenarios=across,
        multiplicity_across_scenarios=across_multiplicity,
        unmatched_tiers=sorted(set(tiers_a) ^ set(tiers_b)),
        unmatched_scenarios={
            info.id: only
            for info, own, other in (
                (reference, scenarios_a, scenarios_b),
                (experiment, scenarios_b, scenarios_a),
            )
            if (only := [s for s in own if s not in other])
        },
        regressions=[
            tier for tier, c in by_tier.items() if c.verdict in (Verdict.worse, Verdict.mixed)
        ],
    )


def _across(
    pairs: dict[str, tuple[Group, Group]],
    reference_id: str,
    by_scenario: dict[str, dict[str, Comparison]],
    correction: Correction,
    alpha: float,
) -> tuple[dict[str, ScenarioComparison], Multiplicity | None]:
    """Each tier (its runs in B, in A) compared across the scenarios, the comparisons
    corrected as their own family and each planned at the family's level."""
    across = {
        tier: c
        for tier, (mine, theirs) in pairs.items()
        if (c := across_scenarios(mine, theirs, reference_id, alpha, CONFIDENCE)) is not None
    }
    if not across:
        return across, None
    across, multiplicity = correct_comparisons(across, by_scenario, correction, alpha)
    level = multiplicity.lone_test_alpha
    planned_across = {
        tier: c.model_copy(
            update={
                "planning": planned(
                    clustered(pairs[tier][0], "passed", CONFIDENCE),
                    clustered(pairs[tier][1], "passed", CONFIDENCE),
                    c.these_scenarios.scenarios,
                    level,
                )
            }
        )
        for tier, c in across.items()
    }
    return planned_across, multiplicity


def runs_icc(runs: Sequence[RunResult]) -> float | None:
    """The intra-scenario correlation of the pass rate these runs showed (counted runs
    only), as a report and `compare` plan at it: the mean of each tier's implied one
    (core.analysis.scenarios.observed_icc); None when no tier measured one (fewer than
    two scenarios with runs, one run per scenario, or every run alike)."""
    return observed_icc(
        clustered(tier, "passed", CONFIDENCE) for tier in Group.of(runs).split("tier").values()
    )
