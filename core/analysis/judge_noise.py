"""The judge's own noise beside the runs' spread, per tier, and the results against
the baseline that this noise alone could explain (README, "Judge noise").

With `judge.repeats` = K > 1 each run has K weighted scores s_1..s_K and its score
is their mean m. Per tier, over its counted runs with a judge score:

- judge variance = mean over runs of the sample variance of their K scores
  (sum((s_i - m)^2) / (K - 1));
- judge SD of a run's score = sqrt(judge variance / K) (the mean of K judgments);
- run-to-run variance = sample variance of the runs' scores m;
- judge share = (judge variance / K) / run-to-run variance.

A tier's result against the baseline lies within the judge's noise when
|Δ median composite| < 2 x impl share x sqrt(sd_tier^2 + sd_baseline^2), where
sd is each tier's judge SD of a run's score and impl share =
impl_weight / (pass_weight + impl_weight), the part of the composite the judge
score makes (impl_rate is the judge score). Both its uplift and its verdict are
then flagged: a judge as noisy as this one could have made the difference alone.
"""

from __future__ import annotations

import math
import statistics

from core.analysis.columns import Group
from core.matrix import Scoring
from core.results.report import (
    CrossTierResult,
    JudgeNoiseFlag,
    JudgeSummary,
    TierJudgeNoise,
    TierReport,
)

# How many judge SDs a difference must exceed to be more than the judge's noise.
NOISE_SDS = 2.0


def judge_summary(
    runs: dict[str, Group],
    tiers: dict[str, TierReport],
    cross: CrossTierResult,
    scoring: Scoring,
) -> JudgeSummary | None:
    """None when no run was judged. `runs`: each tier's (the keys of `tiers`)."""
    judged = [j for tier in tiers for j in runs[tier].column("judge") if j is not None]
    if not judged:
        return None
    noise = {tier: tier_noise(runs[tier]) for tier in tiers}
    impl_share = scoring.impl_weight / (scoring.pass_weight + scoring.impl_weight)
    base = noise.get(cross.baseline)
    flags = []
    for tier, report in tiers.items():
        vs = report.analysis.vs_baseline
        sd = noise[tier].judge_sd_of_mean
        if vs is None or vs.composite_median_delta is None or sd is None or base is None:
            continue
        if base.judge_sd_of_mean is None:
            continue
        band = NOISE_SDS * impl_share * math.hypot(sd, base.judge_sd_of_mean)
        if abs(vs.composite_median_delta) < band:
            flags.append(
                JudgeNoiseFlag(
                    tier=tier,
                    difference=vs.composite_median_delta,
                    band=band,
                    verdict=vs.verdict,
                    uplift=cross.tier_uplift.get(tier),
                )
            )
    return JudgeSummary(
        judgments=sum(j.repeats for j in judged),
        cached=sum(j.cached for j in judged),
        tiers=noise,
        within_noise=flags,
    )


def tier_noise(runs: Group) -> TierJudgeNoise:
    """The noise figures of one tier's judged runs (the counted ones with a score)."""
    judges = [
        j for j in runs.counted.column("judge") if j is not None and j.weighted_score is not None
    ]
    scores = [j.weighted_score for j in judges if j.weighted_score is not None]
    repeated = [j.scores for j in judges if len(j.scores) > 1]
    repeats = min((len(s) for s in repeated), default=min((j.repeats for j in judges), default=1))
    judge_variance = statistics.fmean(map(statistics.variance, repeated)) if repeated else None
    run_variance = statistics.variance(scores) if len(scores) > 1 else None
    sd_of_mean = None if judge_variance is None else math.sqrt(judge_variance / repeats)
    share = None
    if judge_variance is not None and run_variance:
        share = judge_variance / repeats / run_variance
    return TierJudgeNoise(
        judged_runs=len(scores),
        repeats=repeats,
        judge_variance=judge_variance,
        judge_sd_of_mean=sd_of_mean,
        run_variance=run_variance,
        judge_share=share,
    )
