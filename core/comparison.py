"""Is one group of runs significantly different from another?

The same two tests answer it everywhere: each tier against the baseline tier
in a report, and each tier (x scenario) of an experiment against an earlier
experiment in `scheduler compare`. Passes: two-sided Fisher's exact test.
Composite scores: two-sided Mann-Whitney U test, its direction read from
U / (n*m), the chance that a run here scores above a reference run.

p-values are per test and not corrected for multiple comparisons: with many
tiers and scenarios, some will fall under alpha by chance; lower alpha to
guard against that.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.ordering import ordered_ids
from core.report_models import Comparison, ExperimentComparison, ExperimentInfo, Verdict
from core.results import RunResult
from core.significance import fisher_exact, mann_whitney_u
from core.stats import statistics

ALPHA = 0.05


def compare_runs(
    runs: Sequence[RunResult],
    reference_runs: Sequence[RunResult],
    reference: str,
    alpha: float = ALPHA,
) -> Comparison:
    """`runs` against `reference_runs`; infrastructure errors are left out of both."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be within (0, 1), got {alpha}")
    valid = [r for r in runs if r.counted]
    base = [r for r in reference_runs if r.counted]
    passes = sum(1 for r in valid if r.passed)
    base_passes = sum(1 for r in base if r.passed)
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
    composites = [r.composite_score for r in valid]
    base_composites = [r.composite_score for r in base]
    test = mann_whitney_u(composites, base_composites)
    prob_superior = test.u / (len(valid) * len(base))
    median = statistics(composites).median
    base_median = statistics(base_composites).median
    assert median is not None and base_median is not None  # both samples are non-empty
    directions = {
        _direction(pass_rate - base_rate, fisher_p, alpha),
        _direction(prob_superior - 0.5, test.p, alpha),
    }
    return counts.model_copy(
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
            "verdict": _verdict(directions),
        }
    )


def _direction(delta: float, p: float, alpha: float) -> int:
    """+1 significantly better, -1 significantly worse, 0 neither."""
    if p >= alpha or delta == 0:
        return 0
    return 1 if delta > 0 else -1


def _verdict(directions: set[int]) -> Verdict:
    if {1, -1} <= directions:
        return Verdict.mixed
    if 1 in directions:
        return Verdict.better
    if -1 in directions:
        return Verdict.worse
    return Verdict.no_difference


def compare_experiments(
    reference: ExperimentInfo,
    reference_runs: Sequence[RunResult],
    experiment: ExperimentInfo,
    runs: Sequence[RunResult],
    alpha: float = ALPHA,
) -> ExperimentComparison:
    """Every tier and tier x scenario the two experiments share, B (`experiment`) against A.

    A tier regressed when either test finds it significantly worse (verdict
    worse or mixed): a CI gate should stop on any significant loss.
    """
    tiers_b = ordered_ids(experiment.tiers, (r.tier for r in runs))
    tiers_a = ordered_ids(reference.tiers, (r.tier for r in reference_runs))
    scenarios_a = ordered_ids(reference.scenarios, (r.scenario for r in reference_runs))
    scenarios = [
        s for s in ordered_ids(experiment.scenarios, (r.scenario for r in runs)) if s in scenarios_a
    ]
    by_tier: dict[str, Comparison] = {}
    by_scenario: dict[str, dict[str, Comparison]] = {}
    for tier in (t for t in tiers_b if t in tiers_a):
        mine = [r for r in runs if r.tier == tier]
        theirs = [r for r in reference_runs if r.tier == tier]
        by_tier[tier] = compare_runs(mine, theirs, reference.id, alpha)
        by_scenario[tier] = {
            scenario: compare_runs(
                [r for r in mine if r.scenario == scenario],
                [r for r in theirs if r.scenario == scenario],
                reference.id,
                alpha,
            )
            for scenario in scenarios
        }
    return ExperimentComparison(
        reference=reference,
        experiment=experiment,
        alpha=alpha,
        tiers=by_tier,
        scenarios=by_scenario,
        unmatched_tiers=sorted(set(tiers_a) ^ set(tiers_b)),
        regressions=[
            tier for tier, c in by_tier.items() if c.verdict in (Verdict.worse, Verdict.mixed)
        ],
    )
