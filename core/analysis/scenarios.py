"""A tier with its scenarios taken into account: the runs of one scenario share its
difficulty, so a tier's runs are clusters, not independent draws (Miller 2024).

Per tier with two or more scenarios: its pass rate and mean composite with the
scenarios as clusters. Per tier against the baseline, the two questions a reader
may mean, each answered by name (core.stats.clustered has the formulas):

- "on these scenarios": stratified by scenario (Cochran-Mantel-Haenszel and the
  Mantel-Haenszel common risk difference on passes, van Elteren on composite
  scores), with Breslow-Day's test of whether the effect differs by scenario;
- "on scenarios like these": the per-scenario differences of the means, with
  Student's t on n - 1 degrees of freedom.

Their four p-values per tier are one family of their own, corrected as the
report's run-level tests are (Holm by default), so the run-level figures stay
what they were. Each question's verdict comes from its two tests, and the
tier's verdict against the baseline is the one on these scenarios: pooled
over the runs, Fisher's and Mann-Whitney's tests read a difference between
scenarios (which tier ran more of an easy one) as a difference between tiers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from statistics import fmean

from core.analysis.columns import Group
from core.analysis.verdicts import direction, verdict_of
from core.results.report import (
    ClusteredMean,
    Comparison,
    GeneralisedComparison,
    Heterogeneity,
    Interval,
    Multiplicity,
    NoInterval,
    PairedDifference,
    PlannedDetectable,
    ScenarioComparison,
    StratifiedComparison,
    TierReport,
    Verdict,
)
from core.stats.choices import Correction
from core.stats.clustered import (
    MIN_SCENARIOS_FOR_INTERVAL,
    MIN_SCENARIOS_TO_GENERALISE,
    PLANNING_POWER,
    PLANNING_RATE,
    Stratum,
    breslow_day,
    clustered_mean,
    mantel_haenszel,
    paired_t,
    planned_detectable,
    van_elteren,
)
from core.stats.significance import adjust_p, lone_test_alpha

CLUSTERED = "clustered by scenario (CR1, G/(G-1)), Student t on G-1 df, {:.0%}, clipped to [0, 1]"
PAIRED = "Student t on n-1 df over per-scenario differences, {:.0%}"
SATO = "Mantel-Haenszel, Sato variance, normal, {:.0%}"
STRATIFIED = "CMH and van Elteren on these {} scenarios"
NO_SPREAD_STRATIFIED = (
    "in each scenario every run passed or every run failed, on each side: there is no "
    "spread to put an interval on"
)


def clustered(runs: Group, field: str, confidence: float) -> ClusteredMean | None:
    """The mean of `field` over the counted runs with their scenarios as clusters; None
    with fewer than two scenarios (one scenario has nothing to cluster)."""
    scenarios = runs.counted.split("scenario")
    if len(scenarios) < 2:
        return None
    c = clustered_mean([g.column(field) for g in scenarios.values()], confidence)
    return ClusteredMean(
        mean=c.mean,
        scenarios=c.clusters,
        runs=c.n,
        se_independent=c.se_independent,
        se_cr0=c.se_cr0,
        se=c.se_cr1,
        df=c.df,
        ci=_reported(
            c.clusters,
            c.se_cr1,
            "every run has the same value: there is no spread to put an interval on",
            Interval(
                low=c.low, high=c.high, confidence=confidence, method=CLUSTERED.format(confidence)
            ),
        ),
        design_effect=c.design_effect,
        icc=c.icc,
    )


def across_scenarios(
    runs: Group, reference_runs: Group, reference: str, alpha: float, confidence: float
) -> ScenarioComparison | None:
    """`runs` against `reference_runs` scenario by scenario (counted runs only); None with
    fewer than two scenarios that both sides ran. Judged alone until its family is
    corrected (correct_across)."""
    mine = runs.counted.split("scenario")
    theirs = reference_runs.counted.split("scenario")
    shared = sorted(s for s in mine if s in theirs)
    if len(shared) < 2:
        return None
    strata = [
        Stratum(
            sum(mine[s].column("passed")),
            len(mine[s]),
            sum(theirs[s].column("passed")),
            len(theirs[s]),
        )
        for s in shared
    ]
    mh = mantel_haenszel(strata, confidence)
    ranks = van_elteren(
        [(mine[s].column("composite_score"), theirs[s].column("composite_score")) for s in shared]
    )
    rate_differences = [
        st.passes / st.runs - st.reference_passes / st.reference_runs for st in strata
    ]
    composite_differences = [
        fmean(mine[s].column("composite_score")) - fmean(theirs[s].column("composite_score"))
        for s in shared
    ]
    heterogeneity = breslow_day(strata)
    comparison = ScenarioComparison(
        reference=reference,
        these_scenarios=StratifiedComparison(
            scenarios=len(shared),
            cmh=mh.statistic,
            cmh_p=mh.p,
            cmh_p_continuity=mh.p_continuity,
            risk_difference=mh.risk_difference,
            risk_difference_ci=(
                Interval(
                    low=mh.low, high=mh.high, confidence=confidence, method=SATO.format(confidence)
                )
                if mh.se
                else NoInterval(not_reported=NO_SPREAD_STRATIFIED)
            ),
            van_elteren_z=ranks.z,
            van_elteren_p=ranks.p,
            verdict=Verdict.no_difference,
        ),
        like_these=GeneralisedComparison(
            scenarios=len(shared),
            pass_rate=_paired(rate_differences, confidence),
            composite=_paired(composite_differences, confidence),
            too_few_scenarios=len(shared) < MIN_SCENARIOS_TO_GENERALISE,
            verdict=Verdict.no_difference,
        ),
        heterogeneity=Heterogeneity(
            statistic=None if heterogeneity is None else heterogeneity.statistic,
            df=0 if heterogeneity is None else heterogeneity.df,
            p=None if heterogeneity is None else heterogeneity.p,
            opposite=[
                s
                for s, d in zip(shared, rate_differences, strict=True)
                if d * mh.risk_difference < 0
            ],
        ),
    )
    return _judged(comparison, _raw(comparison), alpha)


def _paired(differences: Sequence[float], confidence: float) -> PairedDifference:
    p = paired_t(differences, confidence)
    return PairedDifference(
        scenarios=p.n,
        mean=p.mean,
        se=p.se,
        df=p.df,
        ci=_reported(
            p.n,
            p.se,
            f"the difference is the same in each of the {p.n} scenarios: there is no spread "
            "to put an interval on",
            Interval(
                low=p.low, high=p.high, confidence=confidence, method=PAIRED.format(confidence)
            ),
        ),
        t=p.t,
        p=p.p,
    )


def _reported(scenarios: int, se: float, no_spread: str, ci: Interval) -> Interval | NoInterval:
    """`ci`, or the words for what cannot be concluded in its place: with too few
    scenarios a t interval spans more than the whole range, and with no spread at all
    it would claim a certainty a handful of scenarios cannot give."""
    if scenarios < MIN_SCENARIOS_FOR_INTERVAL:
        return NoInterval(not_reported=too_few_for_interval(scenarios))
    if se == 0:
        return NoInterval(not_reported=no_spread)
    return ci


def too_few_for_interval(scenarios: int) -> str:
    return f"{scenarios} scenarios are too few to say anything about scenarios like these"


def _raw(c: ScenarioComparison) -> list[float]:
    """The family's four p-values of one tier, in the order _judged reads them."""
    these, like = c.these_scenarios, c.like_these
    return [these.cmh_p, these.van_elteren_p, like.pass_rate.p, like.composite.p]


def stratified_directions(
    these: StratifiedComparison, cmh_p: float, ranks_p: float, alpha: float
) -> tuple[int, int]:
    """What each of the two stratified tests says at `alpha` with these p-values:
    passes (Cochran-Mantel-Haenszel), composite scores (van Elteren); +1, -1 or 0."""
    return (
        direction(these.risk_difference or 0.0, cmh_p, alpha),
        direction(these.van_elteren_z or 0.0, ranks_p, alpha),
    )


def _judged(c: ScenarioComparison, adjusted: Sequence[float], alpha: float) -> ScenarioComparison:
    """`c` with these adjusted p-values and the verdicts they give at `alpha`."""
    cmh_p, ranks_p, rate_p, composite_p = adjusted
    these, like = c.these_scenarios, c.like_these
    these = these.model_copy(
        update={
            "cmh_p_adjusted": cmh_p,
            "van_elteren_p_adjusted": ranks_p,
            "verdict": verdict_of(set(stratified_directions(these, cmh_p, ranks_p, alpha))),
        }
    )
    rate = like.pass_rate.model_copy(update={"p_adjusted": rate_p})
    composite = like.composite.model_copy(update={"p_adjusted": composite_p})
    # Below the scenarios an interval needs, the t test's p (on 1 df: p = 0 when the
    # scenarios agree exactly) is no verdict either.
    like_verdict = (
        Verdict.too_few_scenarios
        if like.scenarios < MIN_SCENARIOS_FOR_INTERVAL
        else verdict_of(
            {direction(rate.mean, rate_p, alpha), direction(composite.mean, composite_p, alpha)}
        )
    )
    like = like.model_copy(
        update={"pass_rate": rate, "composite": composite, "verdict": like_verdict}
    )
    return c.model_copy(update={"these_scenarios": these, "like_these": like})


_AGAINST = {
    Verdict.better: (Verdict.worse, Verdict.mixed),
    Verdict.worse: (Verdict.better, Verdict.mixed),
}


def correct_across(
    tiers: dict[str, TierReport], correction: Correction, alpha: float
) -> tuple[dict[str, TierReport], Multiplicity | None]:
    """Every tier's tests across scenarios corrected as one family, and the tier row's
    verdict against the baseline taken from these scenarios. None: no tier has such
    tests."""
    compared = {t: r.analysis.across_scenarios for t, r in tiers.items()}
    family = {t: c for t, c in compared.items() if c is not None}
    if not family:
        return tiers, None
    cells = {
        tier_id: {s: cell.analysis.vs_baseline for s, cell in tiers[tier_id].scenarios.items()}
        for tier_id in family
    }
    judged, multiplicity = correct_comparisons(family, cells, correction, alpha)
    done = {}
    for tier_id, c in judged.items():
        baseline = tiers.get(c.reference)
        planning = planned(
            tiers[tier_id].analysis.pass_rate_clustered,
            None if baseline is None else baseline.analysis.pass_rate_clustered,
            c.these_scenarios.scenarios,
            multiplicity.lone_test_alpha,
        )
        vs = tiers[tier_id].analysis.vs_baseline
        analysis = tiers[tier_id].analysis.model_copy(
            update={
                "across_scenarios": c.model_copy(update={"planning": planning}),
                "vs_baseline": None if vs is None else decided(vs, c),
            }
        )
        done[tier_id] = tiers[tier_id].model_copy(update={"analysis": analysis})
    return {t: done.get(t, r) for t, r in tiers.items()}, multiplicity


def correct_comparisons(
    family: dict[str, ScenarioComparison],
    cells: Mapping[str, Mapping[str, Comparison | None]],
    correction: Correction,
    alpha: float,
) -> tuple[dict[str, ScenarioComparison], Multiplicity]:
    """The tiers' comparisons across scenarios corrected as one family (four tests each);
    the scenarios that went significantly against a tier's verdict on these scenarios
    named, from its scenario rows' own (already corrected) tests in `cells`."""
    adjusted = iter(adjust_p([p for c in family.values() for p in _raw(c)], correction))
    tests = 4 * len(family)
    multiplicity = Multiplicity(
        correction=correction,
        alpha=alpha,
        tests=tests,
        lone_test_alpha=lone_test_alpha(alpha, correction, tests),
    )
    done = {}
    for tier_id, c in family.items():
        judged = _judged(c, [next(adjusted) for _ in range(4)], alpha)
        against = _AGAINST.get(judged.these_scenarios.verdict, ())
        rows = cells.get(tier_id, {})
        significant = [
            s
            for s in judged.heterogeneity.opposite
            if (vs := rows.get(s)) is not None and vs.verdict in against
        ]
        heterogeneity = judged.heterogeneity.model_copy(
            update={"significant_opposite": significant}
        )
        done[tier_id] = judged.model_copy(update={"heterogeneity": heterogeneity})
    return done, multiplicity


def decided(pooled: Comparison, c: ScenarioComparison) -> Comparison:
    """A tier's test with the verdict on these scenarios, the pooled one kept beside."""
    these = c.these_scenarios
    return pooled.model_copy(
        update={
            "verdict": these.verdict,
            "verdict_from": STRATIFIED.format(these.scenarios),
            "pooled_verdict": pooled.verdict,
        }
    )


def observed_icc(sides: Iterable[ClusteredMean | None]) -> float | None:
    """The intra-scenario correlation of the pass rate these tiers showed, the one planning
    uses: the mean of each tier's implied one; None when none measured one (a single
    scenario, one run per scenario, or every run alike)."""
    iccs = [side.icc for side in sides if side is not None and side.icc is not None]
    return fmean(iccs) if iccs else None


def planned(
    tier: ClusteredMean | None, reference: ClusteredMean | None, scenarios: int, level: float
) -> PlannedDetectable | None:
    """What `scenarios` scenarios x the tier's runs per scenario detect at the
    intra-scenario correlation the tier and its reference showed (their pass rates with
    the scenarios as clusters), at `level`, the level one test of the family across
    scenarios must reach alone; None when neither showed one."""
    icc = observed_icc([tier, reference])
    if tier is None or icc is None:
        return None
    g, m = scenarios, max(1, round(tier.runs / tier.scenarios))

    def like(scenarios: int, runs: int) -> float | None:
        return planned_detectable(scenarios, runs, icc, level).like_these

    plan = planned_detectable(g, m, icc, level)
    return PlannedDetectable(
        icc=icc,
        scenarios=g,
        runs=m,
        alpha=level,
        power=PLANNING_POWER,
        rate=PLANNING_RATE,
        these_scenarios=plan.these_scenarios,
        like_these=plan.like_these,
        like_these_limit=plan.like_these_limit,
        like_these_twice_the_scenarios=like(2 * g, m),
        like_these_twice_the_runs=like(g, 2 * m),
    )
