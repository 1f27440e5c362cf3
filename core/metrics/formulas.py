"""ProjectScylla's per-run, grading and cross-tier formulas and onetool's per-call ones,
as pure functions (docs/ARCHITECTURE.md, "Where the definitions come from").

Where the specifications disagree: impl_rate falls back to the gates without a
judge, composite_score is ProjectScylla's formula (grades come from it), and the
gate/judge/interaction blend of the evaluation layers (llm-tool-test) is the
separate `layered_composite`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from core.results.run import InteractionMetrics
from core.results.transcript import LLMCallMetrics

# Reading a stored report imports these formulas (the metrics' catalog) and no matrix.
if TYPE_CHECKING:
    from core.matrix import CompositeWeights

# Scores are ratios and weighted sums of floats: 0.85 may arrive as 0.8499999999999999,
# and a report showing 0.85 beside grade C would be wrong.
GRADE_TOLERANCE = 1e-9


def pass_rate(passed: bool) -> float:
    return 1.0 if passed else 0.0


def impl_rate(
    judge_weighted_score: float | None,
    gates_passed: int,
    gates_total: int,
    *,
    passed: bool = True,
) -> float:
    """The judge's weighted score; without a judge, the share of gates passed.

    With neither, nothing measures the implementation, so it follows the outcome:
    1.0 when the run passed (vacuously true of zero gates and no judge), 0.0 when
    the caller knows it failed otherwise (timeout, crash) and says `passed=False`.
    """
    if judge_weighted_score is not None:
        return _fraction(judge_weighted_score, "judge weighted score")
    if gates_total > 0:
        return fraction_of(gates_passed, gates_total, "gates passed")
    return pass_rate(passed)


def cost_of_pass(cost: float, pass_rate: float) -> float:
    """Expected spend per pass: cost / pass_rate, infinite when nothing passes."""
    _fraction(pass_rate, "pass rate")
    if math.isnan(cost) or cost < 0:
        raise ValueError(f"cost must be a non-negative number, got {cost}")
    return math.inf if pass_rate == 0 else cost / pass_rate


def composite_score(
    pass_rate: float, impl_rate: float, pass_weight: float, impl_weight: float
) -> float:
    """(pass * pass_weight + impl * impl_weight) / (pass_weight + impl_weight)."""
    return _weighted_mean(
        [
            (_fraction(pass_rate, "pass rate"), pass_weight),
            (_fraction(impl_rate, "impl rate"), impl_weight),
        ]
    )


def interaction_score(interaction: InteractionMetrics) -> float:
    """Layer 1 as one number: the first-try success rate, llm-tool-test's combined signal
    of documentation and CLI quality (errors and retries both lower it)."""
    return interaction.first_try_success_rate


def layered_composite(
    gates_passed: int,
    gates_total: int,
    judge_score: float | None,
    interaction: InteractionMetrics,
    weights: CompositeWeights,
) -> float | None:
    """The evaluation layers' (llm-tool-test's) optional composite over the layers a run has.

    Gates score passed/total, the judge its weighted score, interaction its
    `interaction_score`. A layer that is absent (no gates, judge disabled or
    failed to answer, no target command run: no first try to score) drops out and
    the remaining weights are renormalized. None when no layer with a positive
    weight is present.
    """
    layers = []
    if interaction.total_commands > 0:
        layers.append((interaction_score(interaction), weights.interaction_weight))
    if gates_total > 0:
        layers.append((fraction_of(gates_passed, gates_total, "gates passed"), weights.gate_weight))
    if judge_score is not None:
        layers.append((_fraction(judge_score, "judge score"), weights.judge_weight))
    if sum(weight for _, weight in layers) <= 0:
        return None
    return _weighted_mean(layers)


def letter_grade(score: float, grades: Mapping[str, float] | None = None) -> str:
    """The grade with the highest threshold that `score` reaches (`grades`: default, the
    matrix's default scale)."""
    if grades is None:
        from core.matrix import DEFAULT_GRADES

        grades = DEFAULT_GRADES
    if math.isnan(score):
        raise ValueError("cannot grade NaN")
    for grade, threshold in sorted(grades.items(), key=lambda item: (-item[1], item[0])):
        if score + GRADE_TOLERANCE >= threshold:
            return grade
    raise ValueError(f"score {score} is below every grade threshold {dict(grades)}")


def tier_uplift(tier_score: float, baseline_score: float) -> float | None:
    """(tier - baseline) / baseline; None when the baseline is 0 (no relative change)."""
    if math.isnan(tier_score) or math.isnan(baseline_score):
        raise ValueError("tier uplift got NaN")
    if baseline_score == 0:
        return None
    return (tier_score - baseline_score) / baseline_score


def consistency(mean: float, std_dev: float) -> float:
    """1 - std_dev / mean, clamped to [0, 1] (ProjectScylla). A zero mean of non-negative
    scores means every run scored 0: the same every time, so 1.0."""
    if math.isnan(mean) or math.isnan(std_dev) or mean < 0 or std_dev < 0:
        raise ValueError(f"consistency needs a non-negative mean and spread, got {mean}, {std_dev}")
    if mean == 0:
        return 1.0
    return min(1.0, max(0.0, 1.0 - std_dev / mean))


def frontier_cost_of_pass(costs_of_pass: Mapping[str, float]) -> tuple[float, str] | None:
    """The cheapest tier per pass and its cost of pass (the first tier of a tie); None when
    no tier passed (every cost of pass infinite) or there are none."""
    finite = [(cop, tier) for tier, cop in costs_of_pass.items() if not math.isinf(cop)]
    if not finite:
        return None
    best = min(cop for cop, _ in finite)
    return best, next(tier for cop, tier in finite if cop == best)


def best_value_tier(scores_and_costs: Mapping[str, tuple[float, float]]) -> str | None:
    """The tier with the highest score per dollar (score, cost): a free tier with a score
    above 0 beats every paid one, a score of 0 is worth nothing whatever it costs. Ties go
    to the higher score, then the first tier; None when no tier scored above 0."""

    def value(score: float, cost: float) -> float:
        if score <= 0:
            return 0.0
        return math.inf if cost == 0 else score / cost

    ranked = [
        (value(score, cost), score, -i, tier)
        for i, (tier, (score, cost)) in enumerate(scores_and_costs.items())
    ]
    best = max(ranked, default=None)
    return None if best is None or best[0] == 0 else best[3]


def cost_delta(costs: Sequence[float]) -> float:
    """Difference between the most and the least expensive tier."""
    if not costs:
        raise ValueError("cost delta of no tiers is undefined")
    if any(math.isnan(cost) for cost in costs):
        raise ValueError("cost delta got NaN")
    return max(costs) - min(costs)


# --- per-call metrics (onetool's) ---------------------------------------------------------


def with_cumulative_input(calls: list[LLMCallMetrics]) -> list[LLMCallMetrics]:
    """The calls with `cumulative_input` = input tokens of calls 1..N."""
    total = 0
    result = []
    for call in calls:
        total += call.input_tokens
        result.append(call.model_copy(update={"cumulative_input": total}))
    return result


def base_context(calls: list[LLMCallMetrics]) -> int | None:
    """The first call's input: system prompt and tool definitions, before any history."""
    return calls[0].input_tokens if calls else None


def context_growth_avg(calls: list[LLMCallMetrics]) -> float | None:
    """Average input growth between consecutive calls; 0 for one call, None for none."""
    if not calls:
        return None
    if len(calls) == 1:
        return 0.0
    # sum(call[i+1] - call[i]) / (N - 1) telescopes to (last - first) / (N - 1).
    return (calls[-1].input_tokens - calls[0].input_tokens) / (len(calls) - 1)


# --- checks ----------------------------------------------------------------------------


def _fraction(value: float, what: str) -> float:
    if not 0.0 <= value <= 1.0:  # also refuses NaN
        raise ValueError(f"{what} must be within [0, 1], got {value}")
    return value


def fraction_of(part: float, whole: float, what: str) -> float:
    """part / whole, refusing what cannot be a share (negative, more than whole, NaN)."""
    if not (whole > 0 and 0 <= part <= whole):
        raise ValueError(f"{what}: need 0 <= part <= whole and whole > 0, got {part} / {whole}")
    return part / whole


def _weighted_mean(pairs: Sequence[tuple[float, float]]) -> float:
    if any(math.isnan(weight) or weight < 0 for _, weight in pairs):
        raise ValueError(f"weights must be non-negative numbers, got {[w for _, w in pairs]}")
    total = sum(weight for _, weight in pairs)
    if total <= 0:
        raise ValueError("weights must not all be 0")
    return sum(value * weight for value, weight in pairs) / total


# --- pass@k ---------------------------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chance that at least one of k runs drawn without replacement passes: the unbiased
    estimator 1 - C(n-c, k) / C(n, k) (Chen et al. 2021); n runs, c of them passed."""
    _check_counts(n, c, k)
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) as a product, as Chen et al. compute it (no huge integers).
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Chance that all of k runs drawn without replacement pass: C(c, k) / C(n, k)
    (tau-bench)."""
    _check_counts(n, c, k)
    if c < k:
        return 0.0
    return math.prod((c - i) / (n - i) for i in range(k))


def _check_counts(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
