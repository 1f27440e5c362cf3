"""What a group of runs (a tier, or a tier x scenario) says beyond ProjectScylla's Statistics.

Confidence intervals (Wilson for the pass rate, a seeded bootstrap for the
median composite, and with two or more scenarios the clustered ones of
core.analysis.scenarios), pass@k and pass^k, flaky scenarios, the test against the
baseline tier, and the input tokens of the i-th LLM call (context growth).
Pure and deterministic, like core.analysis.aggregate: the bootstrap has a fixed seed.
"""

from __future__ import annotations

from statistics import fmean

from core.analysis.columns import Group
from core.analysis.comparison import ALPHA, CONFIDENCE, compare
from core.analysis.scenarios import across_scenarios, clustered
from core.metrics.formulas import pass_at_k, pass_hat_k
from core.results.report import Interval, RewardSummary, Statistics, TierAnalysis
from core.stats.descriptive import statistics
from core.stats.significance import (
    bootstrap_mean_interval,
    bootstrap_median_interval,
    wilson_interval,
)

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0
PASS_K = (1, 3, 5, 10)
# Calls past this index are rare and would make every report long.
MAX_CALLS_TRACKED = 50

_WILSON = f"Wilson score, {CONFIDENCE:.0%}"
_BOOTSTRAP = (
    f"percentile bootstrap of the median, {CONFIDENCE:.0%}, "
    f"{BOOTSTRAP_RESAMPLES} resamples, seed {BOOTSTRAP_SEED}"
)
_BOOTSTRAP_MEAN = _BOOTSTRAP.replace("of the median", "of the mean")


def reward_summaries(runs: Group) -> dict[str, RewardSummary]:
    """Each verifier reward over the counted runs of the scenarios that give it: a run
    whose verifier gave none (no reward file, a timeout) earned 0 of it."""
    valid = runs.counted
    scored = list(zip(valid.column("scenario"), valid.column("rewards"), strict=True))
    given: dict[str, set[str]] = {}
    for scenario, rewards in scored:
        for name in rewards:
            given.setdefault(name, set()).add(scenario)
    summaries = {}
    for name, scenarios in sorted(given.items()):
        values = [rewards.get(name, 0.0) for scenario, rewards in scored if scenario in scenarios]
        low, high = bootstrap_mean_interval(values, CONFIDENCE, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED)
        summaries[name] = RewardSummary(
            stats=statistics(values),
            mean_ci=Interval(low=low, high=high, confidence=CONFIDENCE, method=_BOOTSTRAP_MEAN),
        )
    return summaries


def analyse(
    runs: Group,
    baseline: tuple[str, Group] | None = None,
    alpha: float = ALPHA,
) -> TierAnalysis:
    """Intervals, pass@k, flakiness of `runs`; with a baseline (tier id, its runs, same
    scenarios), the test against it. Infrastructure errors are left out."""
    valid = runs.counted
    vs_baseline = None if baseline is None else compare(valid, baseline[1], baseline[0], alpha)
    across = (
        None
        if baseline is None
        else across_scenarios(valid, baseline[1], baseline[0], alpha, CONFIDENCE)
    )
    if not valid:
        return TierAnalysis(vs_baseline=vs_baseline, across_scenarios=across)
    passes = sum(valid.column("passed"))
    low, high = wilson_interval(passes, len(valid), CONFIDENCE)
    median_low, median_high = bootstrap_median_interval(
        valid.column("composite_score"), CONFIDENCE, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED
    )
    outcomes = _outcomes_by_scenario(valid)
    # pass@k needs k runs of every scenario; a tier's figure is the mean over its
    # scenarios, as Chen et al. average over problems.
    ks = [k for k in PASS_K if k <= min(n for n, _ in outcomes.values())]
    return TierAnalysis(
        pass_rate_ci=Interval(low=low, high=high, confidence=CONFIDENCE, method=_WILSON),
        composite_median_ci=Interval(
            low=median_low, high=median_high, confidence=CONFIDENCE, method=_BOOTSTRAP
        ),
        pass_at_k={k: fmean(pass_at_k(n, c, k) for n, c in outcomes.values()) for k in ks},
        pass_hat_k={k: fmean(pass_hat_k(n, c, k) for n, c in outcomes.values()) for k in ks},
        flaky_scenarios=sorted(s for s, (n, c) in outcomes.items() if 0 < c < n),
        vs_baseline=vs_baseline,
        pass_rate_clustered=clustered(valid, "passed", CONFIDENCE),
        composite_mean_clustered=clustered(valid, "composite_score", CONFIDENCE),
        across_scenarios=across,
    )


def _outcomes_by_scenario(runs: Group) -> dict[str, tuple[int, int]]:
    """scenario -> (runs, passes)."""
    return {
        scenario: (len(cell), sum(cell.column("passed")))
        for scenario, cell in runs.split("scenario").items()
    }


def context_by_call(runs: Group) -> list[Statistics]:
    """Statistics of the input tokens of the first, second, ... LLM call, over the runs
    that made that many calls (count says how many did)."""
    calls = [
        [call.input_tokens for call in run_calls[:MAX_CALLS_TRACKED]]
        for run_calls in runs.counted.column("llm_calls")
        if run_calls
    ]
    longest = max(map(len, calls), default=0)
    return [statistics([tokens[i] for tokens in calls if len(tokens) > i]) for i in range(longest)]
