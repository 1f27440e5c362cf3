"""What reports are made of: Statistics, tier and experiment reports, comparisons."""

from __future__ import annotations

import calendar
import math
import re
import time
from enum import StrEnum
from typing import Any

from pydantic import Field, model_validator

from core.results.record import Record
from core.results.run import RunResult
from core.wording import plural


class Statistics(Record):
    """ProjectScylla's aggregate statistics. Empty input gives count 0 and None values;
    infinite values alone (a cost of pass that never passed) a std_dev of None, not
    defined (core.stats.descriptive)."""

    median: float | None = None
    mean: float | None = None
    mode: float | None = None
    min: float | None = None
    max: float | None = None
    std_dev: float | None = None
    count: int = 0

    @model_validator(mode="after")
    def _no_spread_of_infinities(self) -> Statistics:
        # Reports stored before said 0 for it, as if the values agreed.
        if self.min == math.inf:
            self.std_dev = None
        return self


class Interval(Record):
    """A confidence interval and how it was computed (core.stats.significance)."""

    low: float
    high: float
    confidence: float = 0.95
    method: str


class NoInterval(Record):
    """Where an interval would claim more than the data hold (a t interval on one degree
    of freedom, or a sample with no spread at all), the words saying what cannot be
    concluded stand in its place: `ci.not_reported` in JSON, the sentence in every other
    format."""

    not_reported: str = Field(description="why there is no interval, in the report's words")


class Verdict(StrEnum):
    """What the two tests of a Comparison say at its alpha."""

    better = "better"
    worse = "worse"
    mixed = "mixed"  # one test significantly better, the other significantly worse
    no_difference = "no significant difference"
    not_enough_runs = "not enough runs"
    # On scenarios like these with fewer than 3 scenarios: a t test on 1 degree of
    # freedom says better or worse whenever the scenarios agree, however few they are.
    too_few_scenarios = "too few scenarios"


class Detectable(Record):
    """The smallest pass-rate differences the runs compared could detect (normal
    approximation, two-sided, at the level one test of the family must reach alone)."""

    improvement: float | None = Field(
        description="smallest rise over the reference rate; None: no rise within [0, 1] is"
    )
    regression: float | None = Field(
        description="smallest fall below the reference rate; None: no fall within [0, 1] is"
    )
    power: float
    alpha: float = Field(description="the per-test level used (Multiplicity.lone_test_alpha)")


class Multiplicity(Record):
    """How a report's or a comparison's tests were corrected for multiple comparisons."""

    correction: str = Field(description="holm, bh (Benjamini-Hochberg) or none")
    alpha: float = Field(description="family-wise error rate (holm), false discovery rate (bh)")
    tests: int = Field(description="tests in the family (two per comparison with runs)")
    lone_test_alpha: float = Field(
        description="the level one test must reach when every other one is null"
    )


class Comparison(Record):
    """A group of runs against a reference group: a tier against the baseline tier, or a
    tier (x scenario) against the same one in an earlier experiment. Only valid runs count.
    Deltas are this group minus the reference."""

    reference: str = Field(description="the baseline tier, or the reference experiment's id")
    runs: int
    passes: int
    reference_runs: int
    reference_passes: int
    pass_rate: float | None = None
    reference_pass_rate: float | None = None
    pass_rate_delta: float | None = None
    fisher_p: float | None = Field(None, description="two-sided Fisher's exact test on passes")
    composite_median: float | None = None
    reference_composite_median: float | None = None
    composite_median_delta: float | None = None
    mann_whitney_u: float | None = Field(None, description="U of this group's composite scores")
    mann_whitney_p: float | None = Field(None, description="two-sided Mann-Whitney U test")
    mann_whitney_method: str | None = Field(None, description="exact or asymptotic")
    prob_superior: float | None = Field(
        None, description="U / (n*m): chance a run here scores above a reference run, ties half"
    )
    fisher_p_adjusted: float | None = Field(
        None, description="fisher_p corrected across the family (Multiplicity)"
    )
    mann_whitney_p_adjusted: float | None = Field(
        None, description="mann_whitney_p corrected across the family (Multiplicity)"
    )
    risk_difference_ci: Interval | None = Field(
        None, description="interval of pass_rate_delta (Newcombe hybrid score)"
    )
    cliffs_delta: float | None = Field(
        None, description="of composite scores: P(here > reference) - P(here < reference)"
    )
    cliffs_delta_ci: Interval | None = None
    detectable: Detectable | None = None
    alpha: float
    verdict: Verdict = Field(description="from the adjusted p-values when corrected")
    verdict_from: str | None = Field(
        None,
        description="None: from the two tests above; else the tests it came from instead "
        "(a tier row with two or more scenarios: the stratified ones, on these scenarios)",
    )
    pooled_verdict: Verdict | None = Field(
        None, description="with verdict_from: what the two tests above say over the pooled runs"
    )


class ClusteredMean(Record):
    """A tier's mean over its runs with its scenarios as clusters (Miller 2024): runs of one
    scenario share its difficulty, so they are not independent draws."""

    mean: float = Field(description="over the runs (each run weighs the same)")
    scenarios: int = Field(description="clusters: scenarios with counted runs (G)")
    runs: int
    se_independent: float = Field(
        description="sqrt(population variance / runs): the SE were the runs independent"
    )
    se_cr0: float = Field(description="sqrt(sum over scenarios of (sum of residuals)^2) / runs")
    se: float = Field(description="CR1: se_cr0 * sqrt(G / (G - 1)), the small-sample correction")
    df: int = Field(description="G - 1")
    ci: Interval | NoInterval = Field(
        description="mean +- t(G - 1) * se, clipped to [0, 1]; not reported with fewer than "
        "3 scenarios or when every run has the same value"
    )
    design_effect: float | None = Field(
        None, description="(se_cr0 / se_independent)^2; None when every run scored the same"
    )
    icc: float | None = Field(
        None,
        description="intra-scenario correlation implied: (design_effect - 1) / (runs per "
        "scenario - 1), within [0, 1]; None with one run per scenario",
    )


class PairedDifference(Record):
    """The mean over scenarios of (the tier's mean - the baseline's mean) in each scenario,
    tested on n - 1 degrees of freedom (Miller 2024, paired differences)."""

    scenarios: int = Field(description="scenarios with counted runs on both sides (n)")
    mean: float
    se: float = Field(description="sample SD of the differences / sqrt(n)")
    df: int
    ci: Interval | NoInterval = Field(
        description="Student t on n - 1 degrees of freedom, clipped to [-1, 1]; not reported "
        "with fewer than 3 scenarios or when every scenario's difference is the same"
    )
    t: float | None = Field(None, description="mean / se; None when se is 0")
    p: float = Field(description="two-sided; with se 0: 0 if mean != 0, else 1")
    p_adjusted: float | None = None


class StratifiedComparison(Record):
    """ "On these scenarios": the tier against the baseline within each scenario, the
    scenarios fixed (the question the runs can answer however few the scenarios are)."""

    question: str = "on these scenarios"
    scenarios: int = Field(description="strata: scenarios with counted runs on both sides")
    cmh: float = Field(description="Cochran-Mantel-Haenszel chi-squared (1 df), no correction")
    cmh_p: float
    cmh_p_continuity: float = Field(description="the same with the 0.5 continuity correction")
    cmh_p_adjusted: float | None = None
    risk_difference: float | None = Field(
        None, description="Mantel-Haenszel common risk difference of the pass rates"
    )
    risk_difference_ci: Interval | NoInterval | None = Field(
        None,
        description="Sato's variance (Sato, Greenland & Robins 1989), clipped to [-1, 1]; not "
        "reported when it is 0 (every scenario all passes or all failures on each side)",
    )
    van_elteren_z: float | None = Field(
        None, description="van Elteren's stratified rank-sum test of composite scores"
    )
    van_elteren_p: float
    van_elteren_p_adjusted: float | None = None
    verdict: Verdict = Field(description="from the adjusted p-values of both tests")


class GeneralisedComparison(Record):
    """ "On scenarios like these": the scenarios as a sample of the scenarios one could
    have written; the per-scenario differences are the data."""

    question: str = "on scenarios like these"
    scenarios: int
    pass_rate: PairedDifference
    composite: PairedDifference = Field(description="of the mean composite score")
    too_few_scenarios: bool = Field(description="fewer than 5 scenarios to generalise from")
    verdict: Verdict = Field(
        description="from the adjusted p-values of both tests; too few scenarios below 3, "
        "where no interval is reported either"
    )


class Heterogeneity(Record):
    """Whether the tier's effect on the pass rate differs from scenario to scenario."""

    test: str = "Breslow-Day"
    statistic: float | None = Field(None, description="chi-squared on scenarios - 1 df")
    df: int = 0
    p: float | None = Field(
        None, description="None: fewer than two scenarios where the odds ratio is defined"
    )
    opposite: list[str] = Field(
        default_factory=list,
        description="scenarios whose pass-rate difference has the other sign than the "
        "common risk difference",
    )
    significant_opposite: list[str] = Field(
        default_factory=list,
        description="of those, the ones whose own test (corrected) says so: worse or mixed "
        "while the tier is better, better or mixed while it is worse",
    )


class PlannedDetectable(Record):
    """The smallest pass-rate difference each question detects with this many scenarios
    and runs at the intra-scenario correlation observed (docs/METRICS.md, "Planning"):
    what the next experiment could see, and what more scenarios or more runs would buy."""

    icc: float = Field(description="the mean of the tier's and the baseline's implied one")
    scenarios: int
    runs: int = Field(description="runs per scenario, the tier's mean")
    alpha: float = Field(description="the level one test of the family must reach alone")
    power: float
    rate: float = Field(description="the pass rate assumed (where a rate varies most)")
    these_scenarios: float
    like_these: float | None
    like_these_limit: float | None = Field(description="the same with unlimited runs")
    like_these_twice_the_scenarios: float | None
    like_these_twice_the_runs: float | None


class ScenarioComparison(Record):
    """A tier against the baseline with its scenarios taken into account, answering two
    questions by name (docs/METRICS.md, "Across scenarios")."""

    reference: str
    these_scenarios: StratifiedComparison
    like_these: GeneralisedComparison
    heterogeneity: Heterogeneity
    planning: PlannedDetectable | None = Field(
        None, description="None when neither side's intra-scenario correlation is measured"
    )


class TierAnalysis(Record):
    """Beyond ProjectScylla's Statistics: intervals, pass@k, flakiness, the baseline test."""

    pass_rate_ci: Interval | None = None
    composite_median_ci: Interval | None = None
    pass_at_k: dict[int, float] = Field(
        default_factory=dict, description="1 - C(n-c,k)/C(n,k); a tier averages its scenarios"
    )
    pass_hat_k: dict[int, float] = Field(
        default_factory=dict, description="C(c,k)/C(n,k); a tier averages its scenarios"
    )
    flaky_scenarios: list[str] = Field(
        default_factory=list, description="scenarios where some runs passed and some failed"
    )
    vs_baseline: Comparison | None = None
    pass_rate_clustered: ClusteredMean | None = Field(
        None, description="with two or more scenarios: scenarios as clusters"
    )
    composite_mean_clustered: ClusteredMean | None = None
    across_scenarios: ScenarioComparison | None = Field(
        None, description="a tier row with two or more scenarios on both sides"
    )


class RewardSummary(Record):
    """One reward of a benchmark task's verifier over a group of runs: the seed's
    Statistics of its per-run values and an interval for its mean. A counted run of a
    scenario that gives this reward but whose verifier gave none counts as 0."""

    stats: Statistics = Field(default_factory=Statistics)
    mean_ci: Interval | None = None


class TierReport(Record):
    """Per tier (and, under `scenarios`, per tier x scenario): the same shape."""

    runs: int = Field(description="runs with a result, infrastructure errors included")
    errors: int = Field(description="infrastructure errors, kept out of the statistics")
    cancelled: int = Field(
        0, description="runs cancelled before they started or ran to their end, kept out"
    )
    not_run: int = Field(0, description="runs the budget kept from starting, kept out")
    counted: int = Field(
        0, description="runs in the statistics: completed, agent_error, timeout, limit, tampered"
    )
    tampered: int = Field(
        0, description="runs that changed the files evaluation reads: counted, never passed"
    )
    outages: int = Field(
        0,
        description="runs that met a model provider outage on any delivery: retried, and an "
        "infrastructure error if the last met one too",
    )
    isolation: str | None = Field(
        None, description="how its agents were confined, in a line (core.results.run.ISOLATIONS)"
    )

    @model_validator(mode="before")
    @classmethod
    def _counted_of_older_reports(cls, data: Any) -> Any:
        # Reports stored before `counted` existed knew only infrastructure errors.
        if isinstance(data, dict) and "counted" not in data and "runs" in data:
            data = {**data, "counted": data["runs"] - data.get("errors", 0)}
        return data

    passes: int = 0
    grade: str | None = None
    consistency: float | None = Field(
        None, description="1 - std_dev / mean of the composite score, clamped to [0, 1]"
    )
    cost_of_pass: float | None = Field(None, description="mean(cost_usd) / mean(pass_rate)")
    cost_unknown_runs: int = 0
    cost_unread_runs: int = Field(
        0,
        description="of cost_unknown_runs, those whose transcript could not be read (nothing "
        "of it was), not those of a model without a price",
    )
    cost_unread_run: str | None = Field(
        None, description="the first of cost_unread_runs, for `scheduler show` to show"
    )
    cost_unrecorded_runs: int = Field(
        0,
        description="of cost_unknown_runs, those whose agent has a model but whose transcript "
        "recorded no usage (a plain transcript; an events file without llm_call events)",
    )
    cost_unrecorded_run: str | None = Field(
        None, description="the first of cost_unrecorded_runs, for `scheduler show` to show"
    )
    unpriced_models: list[str] = Field(
        default_factory=list,
        description="the models without a price that the counted runs of unknown cost named "
        "(the run's, and each LLM call's), sorted: what `pricing:` lacks",
    )
    approximate_exit_code_runs: int = Field(
        0, description="runs whose exit codes came from the plain regex fallback (approximate)"
    )
    pass_rate: Statistics = Field(default_factory=Statistics)
    impl_rate: Statistics = Field(default_factory=Statistics)
    cost_usd: Statistics = Field(default_factory=Statistics)
    judge_cost_usd: Statistics = Field(default_factory=Statistics)
    duration_seconds: Statistics = Field(default_factory=Statistics)
    composite_score: Statistics = Field(default_factory=Statistics)
    layered_composite: Statistics | None = None
    cost_of_pass_per_run: Statistics = Field(default_factory=Statistics)
    input_tokens: Statistics = Field(default_factory=Statistics)
    output_tokens: Statistics = Field(default_factory=Statistics)
    base_context: Statistics = Field(default_factory=Statistics)
    context_growth_avg: Statistics = Field(default_factory=Statistics)
    interaction: dict[str, Statistics] = Field(default_factory=dict)
    process: dict[str, Statistics] = Field(default_factory=dict)
    statuses: dict[str, int] = Field(default_factory=dict)
    rewards: dict[str, RewardSummary] = Field(
        default_factory=dict, description="each verifier reward's figures (benchmark tasks)"
    )
    context_by_call: list[Statistics] = Field(
        default_factory=list, description="input tokens of the i-th LLM call, over the runs"
    )
    analysis: TierAnalysis = Field(default_factory=TierAnalysis)
    scenarios: dict[str, TierReport] = Field(default_factory=dict)


class MetricUplift(Record):
    """One tier against the baseline, metric by metric: (tier - baseline) / baseline,
    None where the baseline's figure is 0 or either is missing (docs/METRICS.md)."""

    pass_rate: float | None = Field(None, description="of the pass rate (passes / counted)")
    impl_rate: float | None = Field(None, description="of the median impl rate")
    composite: float | None = Field(None, description="of the median composite (tier_uplift)")
    cost_change: float | None = Field(None, description="of the median cost; + costs more")


class CrossTierResult(Record):
    baseline: str
    tier_uplift: dict[str, float | None] = Field(default_factory=dict)
    uplift_note: str | None = Field(None, description="why uplift is undefined, when it is")
    uplift: dict[str, MetricUplift] = Field(default_factory=dict)
    pass_rate_variance: float | None = None
    impl_rate_variance: float | None = Field(None, description="of the tiers' median impl rate")
    cost_variance: float | None = None
    cost_delta: float | None = None
    frontier_cost_of_pass: float | None = Field(
        None, description="the lowest tier cost_of_pass; None when no tier passed"
    )
    frontier_tier: str | None = Field(None, description="the tier with frontier_cost_of_pass")
    best_value_tier: str | None = Field(
        None, description="highest median composite per median dollar (docs/METRICS.md)"
    )


class ExperimentStatus(StrEnum):
    pending = "pending"
    running = "running"
    complete = "complete"
    cancelled = "cancelled"
    # An embedded submit or resume stopped by Ctrl-C: its runs wait for a resume
    # (a later command's workers drop their messages, scheduler.running.interrupt).
    interrupted = "interrupted"


# An experiment's id ends with when it was submitted (scheduler.plan.new_experiment_id):
# all that is left to tell of an experiment a broker lost whole.
ID_STAMP = "%Y%m%d-%H%M%S"
_STAMPED = re.compile(r"-(\d{8}-\d{6})-[0-9a-f]+$")


def submitted_at(exp_id: str) -> float | None:
    """When the experiment of this id was submitted (to the second), if its id says."""
    found = _STAMPED.search(exp_id)
    try:
        return None if found is None else float(calendar.timegm(time.strptime(found[1], ID_STAMP)))
    except ValueError:  # named by hand so
        return None


class ExperimentInfo(Record):
    id: str
    name: str
    status: ExperimentStatus = ExperimentStatus.pending
    total_runs: int = 0
    completed_runs: int = Field(0, description="runs with a stored result, of any status")
    errors: int = Field(0, description="infrastructure errors")
    cancelled: int = Field(0, description="runs cancelled before they started or ran to their end")
    not_run: int = Field(0, description="runs the budget kept from starting")
    passes: int = 0
    created_at: float
    finished_at: float | None = None
    tiers: list[str] = Field(default_factory=list)
    scenarios: list[str] = Field(default_factory=list)
    runs_per_tier: int = 0


class BudgetReport(Record):
    """What the experiment spent against its budget (core.store.ledger): first in every report."""

    agent_usd: float | None = Field(None, description="the agent spend ceiling")
    judge_usd: float | None = Field(None, description="the judge spend ceiling")
    agent_spent_usd: float = Field(description="what the agents spent (unknown costs left out)")
    judge_spent_usd: float
    not_run: int = Field(description="runs never started because their cost did not fit")
    notice: str = Field(description='"budget reached: $X of $Y spent, N runs not run" or the spend')

    @property
    def reached(self) -> bool:
        return self.not_run > 0


class CellStop(Record):
    """Why an adaptive tier x scenario cell stopped taking runs."""

    runs: int
    reason: str


class AdaptiveReport(Record):
    """How an adaptive experiment decided how many runs each cell got (core.analysis.sequential)."""

    procedure: str
    cells: dict[str, dict[str, CellStop]] = Field(
        default_factory=dict, description="tier -> scenario -> why its runs stopped"
    )


class TierJudgeNoise(Record):
    """The judge's own noise beside the runs' spread, in one tier (core.analysis.judge_noise)."""

    judged_runs: int = Field(description="counted runs with a judge score")
    repeats: int = Field(description="judgments per run (the fewest, when runs differ)")
    judge_variance: float | None = Field(
        None, description="mean over runs of the sample variance of their K judgments"
    )
    judge_sd_of_mean: float | None = Field(
        None, description="sqrt(judge_variance / K): the judge's SD of one run's score"
    )
    run_variance: float | None = Field(
        None, description="sample variance of the runs' scores (each the mean of its K)"
    )
    judge_share: float | None = Field(
        None, description="(judge_variance / K) / run_variance: the judge's part of the spread"
    )


class JudgeNoiseFlag(Record):
    """A tier's result against the baseline that the judge's noise alone could explain."""

    tier: str
    difference: float = Field(description="Δ median composite against the baseline")
    band: float = Field(description="2 x impl share x sqrt(sd_tier² + sd_baseline²)")
    verdict: Verdict
    uplift: float | None = None


class JudgeSummary(Record):
    """How the runs were judged: judgments asked, from cache, and the judge's noise."""

    judgments: int = 0
    cached: int = Field(0, description="judgments answered from the judgment cache")
    tiers: dict[str, TierJudgeNoise] = Field(default_factory=dict)
    within_noise: list[JudgeNoiseFlag] = Field(default_factory=list)


class ExperimentReport(Record):
    budget: BudgetReport | None = Field(None, description="with a budget: what it came to")
    experiment: ExperimentInfo
    adaptive: AdaptiveReport | None = Field(None, description="with adaptive runs_per_tier")
    version: int = Field(1, description="1: the runs' own; 2, 3...: rejudged (`report --version`)")
    version_note: str | None = Field(None, description="what made this version")
    tiers: dict[str, TierReport] = Field(default_factory=dict)
    cross_tier: CrossTierResult
    multiplicity: Multiplicity | None = Field(
        None, description="the correction of every test against the baseline"
    )
    multiplicity_across_scenarios: Multiplicity | None = Field(
        None, description="the same correction of the tests across scenarios, their own family"
    )
    error_reasons: dict[str, int] = Field(
        default_factory=dict,
        description="infrastructure errors by reason (error_key), most common first",
    )
    judge_errors: int = Field(
        0,
        description="infrastructure errors of a judge that did not answer runs whose agents "
        "and gates ran: `scheduler rejudge` restores them, no agent run again",
    )
    judge: JudgeSummary | None = Field(None, description="None when no run was judged")
    evidence_missing: int = Field(
        0,
        description="runs whose result is stored but whose evidence is not (the broker "
        "refused it, or the worker stopped between the two)",
    )
    runs: list[RunResult] | None = Field(None, description="every RunResult, with --runs")

    @property
    def evidence_notice(self) -> str | None:
        if not self.evidence_missing:
            return None
        return (
            f"evidence of {plural(self.evidence_missing, 'run')} "
            "was not stored (the broker refused it, "
            "full, or the worker stopped right after storing the result): their results "
            "stand; `scheduler show` says which"
        )


class ExperimentComparison(Record):
    """`scheduler compare A B`: each tier and tier x scenario of B against A."""

    reference: ExperimentInfo
    experiment: ExperimentInfo
    alpha: float
    multiplicity: Multiplicity | None = None
    tiers: dict[str, Comparison] = Field(default_factory=dict)
    scenarios: dict[str, dict[str, Comparison]] = Field(default_factory=dict)
    across_scenarios: dict[str, ScenarioComparison] = Field(
        default_factory=dict,
        description="tiers with two or more scenarios run in both: B against A on these "
        "scenarios (the tier's verdict) and on scenarios like these",
    )
    multiplicity_across_scenarios: Multiplicity | None = Field(
        None, description="the correction of the tests across scenarios, their own family"
    )
    unmatched_tiers: list[str] = Field(
        default_factory=list, description="tiers in only one of the two experiments"
    )
    unmatched_scenarios: dict[str, list[str]] = Field(
        default_factory=dict,
        description="by experiment id, the scenarios only it ran: their runs are left out "
        "of every row, a tier's included (its difference would be the other scenario's)",
    )
    regressions: list[str] = Field(
        default_factory=list,
        description="tiers significantly worse in B (verdict worse or mixed, corrected)",
    )
