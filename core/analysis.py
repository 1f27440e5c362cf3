"""What a group of runs (a tier, or a tier x scenario) says beyond the seed statistics.

Confidence intervals (Wilson for the pass rate, a seeded bootstrap for the
median composite), pass@k and pass^k, flaky scenarios, the test against the
baseline tier, and the input tokens of the i-th LLM call (context growth).
Pure and deterministic, like core.aggregate: the bootstrap has a fixed seed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from statistics import fmean

from core.comparison import ALPHA, CONFIDENCE, compare_runs
from core.formulas import pass_at_k, pass_hat_k
from core.report_models import Interval, Statistics, TierAnalysis
from core.results import RunResult
from core.significance import bootstrap_median_interval, wilson_interval
from core.stats import statistics

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


def analyse(
    runs: Sequence[RunResult],
    baseline: tuple[str, Sequence[RunResult]] | None = None,
    alpha: float = ALPHA,
) -> TierAnalysis:
    """Intervals, pass@k, flakiness of `runs`; with a baseline (tier id, its runs, same
    scenarios), the test against it. Infrastructure errors are left out."""
    valid = [r for r in runs if r.counted]
    vs_baseline = None if baseline is None else compare_runs(valid, baseline[1], baseline[0], alpha)
    if not valid:
        return TierAnalysis(vs_baseline=vs_baseline)
    passes = sum(1 for r in valid if r.passed)
    low, high = wilson_interval(passes, len(valid), CONFIDENCE)
    median_low, median_high = bootstrap_median_interval(
        [r.composite_score for r in valid], CONFIDENCE, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED
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
    )


def _outcomes_by_scenario(runs: Sequence[RunResult]) -> dict[str, tuple[int, int]]:
    """scenario -> (runs, passes)."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in runs:
        counts[r.scenario][0] += 1
        counts[r.scenario][1] += r.passed
    return {scenario: (n, c) for scenario, (n, c) in counts.items()}


def context_by_call(runs: Sequence[RunResult]) -> list[Statistics]:
    """Statistics of the input tokens of the first, second, ... LLM call, over the runs
    that made that many calls (count says how many did)."""
    valid = [r for r in runs if r.counted]
    longest = min(MAX_CALLS_TRACKED, max((len(r.llm_calls) for r in valid), default=0))
    return [
        statistics([r.llm_calls[i].input_tokens for r in valid if len(r.llm_calls) > i])
        for i in range(longest)
    ]
