"""Per-run, grading, cross-tier and per-call formulas, and pricing."""

from __future__ import annotations

import math

import pytest

from core.matrix import DEFAULT_GRADES, CompositeWeights, ModelPrice
from core.matrix.presets import PRESETS
from core.metrics import formulas
from core.metrics.pricing import BUILTIN_PRICES, cost_usd, price_for
from core.results.run import InteractionMetrics
from core.results.transcript import LLMCallMetrics

# --- ProjectScylla's example 1 ------------------------------------------------------------


def test_seed_example_1_single_run() -> None:
    pass_rate = formulas.pass_rate(True)
    impl_rate = formulas.impl_rate(0.85, gates_passed=2, gates_total=3)
    assert pass_rate == 1.0
    assert impl_rate == 0.85
    assert formulas.cost_of_pass(0.50, pass_rate) == 0.50
    composite = formulas.composite_score(pass_rate, impl_rate, 0.5, 0.5)
    assert composite == pytest.approx(0.925)
    assert formulas.letter_grade(composite) == "B"


def test_pass_rate_of_a_failure() -> None:
    assert formulas.pass_rate(False) == 0.0


# --- impl_rate, cost of pass, composite -----------------------------------------------------


def test_impl_rate_without_judge_is_share_of_gates() -> None:
    assert formulas.impl_rate(None, gates_passed=3, gates_total=4) == 0.75


def test_impl_rate_prefers_the_judge_over_gates() -> None:
    assert formulas.impl_rate(0.4, gates_passed=4, gates_total=4) == 0.4


def test_impl_rate_with_nothing_measured_follows_the_outcome() -> None:
    assert formulas.impl_rate(None, 0, 0) == 1.0
    assert formulas.impl_rate(None, 0, 0, passed=False) == 0.0


@pytest.mark.parametrize(
    ("judge", "passed", "total"), [(1.2, 0, 0), (math.nan, 0, 0), (None, 5, 4), (None, -1, 4)]
)
def test_impl_rate_rejects_impossible_inputs(judge: float | None, passed: int, total: int) -> None:
    with pytest.raises(ValueError):
        formulas.impl_rate(judge, passed, total)


def test_cost_of_pass_is_infinite_without_a_pass() -> None:
    assert formulas.cost_of_pass(0.5, 0.0) == math.inf


def test_cost_of_pass_divides_by_the_pass_rate() -> None:
    assert formulas.cost_of_pass(0.3, 0.5) == pytest.approx(0.6)


@pytest.mark.parametrize(("cost", "rate"), [(math.nan, 1.0), (-1.0, 1.0), (1.0, math.nan)])
def test_cost_of_pass_rejects_nan_and_negative(cost: float, rate: float) -> None:
    with pytest.raises(ValueError):
        formulas.cost_of_pass(cost, rate)


def test_composite_uses_the_weights() -> None:
    assert formulas.composite_score(1.0, 0.5, 3.0, 1.0) == pytest.approx(0.875)


def test_composite_rejects_zero_weights_and_nan() -> None:
    with pytest.raises(ValueError):
        formulas.composite_score(1.0, 0.5, 0.0, 0.0)
    with pytest.raises(ValueError):
        formulas.composite_score(math.nan, 0.5, 0.5, 0.5)


# --- layered composite -----------------------------------------------------------------------


def _interaction(first_try: float) -> InteractionMetrics:
    return InteractionMetrics(total_commands=10, first_try_success_rate=first_try)


def test_layered_composite_blends_all_three_layers() -> None:
    weights = CompositeWeights(gate_weight=0.5, judge_weight=0.3, interaction_weight=0.2)
    score = formulas.layered_composite(2, 4, 0.8, _interaction(0.9), weights)
    assert score == pytest.approx(0.5 * 0.5 + 0.3 * 0.8 + 0.2 * 0.9)


def test_layered_composite_renormalizes_without_judge() -> None:
    weights = CompositeWeights(gate_weight=0.5, judge_weight=0.3, interaction_weight=0.2)
    score = formulas.layered_composite(2, 4, None, _interaction(0.9), weights)
    assert score == pytest.approx((0.5 * 0.5 + 0.2 * 0.9) / 0.7)


def test_layered_composite_without_gates_or_judge_is_the_interaction_score() -> None:
    score = formulas.layered_composite(0, 0, None, _interaction(0.9), CompositeWeights())
    assert score == pytest.approx(0.9)


def test_layered_composite_leaves_out_the_interaction_of_a_run_without_commands() -> None:
    """No target command, no first try: its 0 would have scored the run as if every
    command had failed."""
    weights = CompositeWeights(gate_weight=0.6, judge_weight=0.0, interaction_weight=0.4)
    none = InteractionMetrics(total_commands=0, first_try_success_rate=0.0)
    assert formulas.layered_composite(1, 1, None, none, weights) == pytest.approx(1.0)
    only = CompositeWeights(gate_weight=0.0, judge_weight=0.0, interaction_weight=1.0)
    assert formulas.layered_composite(1, 1, None, none, only) is None


def test_layered_composite_is_none_when_only_absent_layers_weigh() -> None:
    weights = CompositeWeights(gate_weight=0.0, judge_weight=1.0, interaction_weight=0.0)
    assert formulas.layered_composite(3, 3, None, _interaction(1.0), weights) is None


# --- letter grades ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("score", "grade"),
    [
        (1.0, "A"),
        (0.95, "A"),
        (0.9499, "B"),
        (0.85, "B"),
        (0.8499999999999999, "B"),  # float noise of a ratio that is 0.85
        (0.75, "C"),
        (0.7499, "D"),
        (0.65, "D"),
        (0.6499, "F"),
        (0.0, "F"),
    ],
)
def test_seed_grade_thresholds(score: float, grade: str) -> None:
    assert formulas.letter_grade(score) == grade
    assert formulas.letter_grade(score, DEFAULT_GRADES) == grade


def test_custom_grade_scale() -> None:
    scale = {"pass": 0.6, "borderline": 0.4, "fail": 0.0}
    assert formulas.letter_grade(0.7, scale) == "pass"
    assert formulas.letter_grade(0.5, scale) == "borderline"
    assert formulas.letter_grade(0.1, scale) == "fail"


def test_grade_below_every_threshold_or_nan_is_an_error() -> None:
    with pytest.raises(ValueError, match="below every grade"):
        formulas.letter_grade(0.1, {"ok": 0.5})
    with pytest.raises(ValueError):
        formulas.letter_grade(math.nan)


# --- cross-tier ------------------------------------------------------------------------------


def test_seed_example_3_tier_uplift() -> None:
    baseline = 0.70
    uplifts = [formulas.tier_uplift(score, baseline) for score in (0.80, 0.85, 0.90)]
    assert [round(u, 3) for u in uplifts if u is not None] == [0.143, 0.214, 0.286]


def test_uplift_of_seed_interpretation_example_and_regression() -> None:
    assert formulas.tier_uplift(0.90, 0.75) == pytest.approx(0.20)
    assert formulas.tier_uplift(0.60, 0.75) == pytest.approx(-0.20)


def test_uplift_over_a_zero_baseline_is_none() -> None:
    assert formulas.tier_uplift(0.5, 0.0) is None


def test_cost_delta_is_max_minus_min() -> None:
    assert formulas.cost_delta([0.3, 0.9, 0.5]) == pytest.approx(0.6)
    with pytest.raises(ValueError):
        formulas.cost_delta([])


# --- per-call metrics ------------------------------------------------------------------------


def _calls(*inputs: int) -> list[LLMCallMetrics]:
    return [LLMCallMetrics(input_tokens=n, output_tokens=10) for n in inputs]


def test_per_call_context_growth_example() -> None:
    calls = formulas.with_cumulative_input(_calls(1000, 1500, 2300))
    assert [c.cumulative_input for c in calls] == [1000, 2500, 4800]
    assert formulas.base_context(calls) == 1000
    # ((1500 - 1000) + (2300 - 1500)) / 2
    assert formulas.context_growth_avg(calls) == 650.0


def test_context_growth_can_shrink() -> None:
    assert formulas.context_growth_avg(_calls(3000, 1000)) == -2000.0


def test_single_call_grows_by_zero_and_no_calls_have_no_context() -> None:
    assert formulas.context_growth_avg(_calls(1200)) == 0.0
    assert formulas.context_growth_avg([]) is None
    assert formulas.base_context([]) is None
    assert formulas.with_cumulative_input([]) == []


def test_cumulative_input_leaves_the_input_list_alone() -> None:
    calls = _calls(5, 7)
    formulas.with_cumulative_input(calls)
    assert [c.cumulative_input for c in calls] == [0, 0]


# --- pricing ---------------------------------------------------------------------------------


def test_seed_prices_are_built_in() -> None:
    assert price_for("claude-opus-4-5", {}) == ModelPrice(input=15.0, output=75.0)
    assert price_for("claude-opus-4.5", {}) == ModelPrice(input=15.0, output=75.0)
    assert price_for("claude-sonnet-4", {}) == ModelPrice(input=3.0, output=15.0)
    assert price_for("gpt-4o", {}) == ModelPrice(input=5.0, output=15.0)
    assert set(BUILTIN_PRICES) >= {"claude-opus-4-5", "claude-sonnet-4", "gpt-4o"}


@pytest.mark.parametrize(
    ("model", "base"),
    [
        ("claude-sonnet-4-20250514", "claude-sonnet-4"),
        ("claude-opus-4-5-20251101", "claude-opus-4-5"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
    ],
)
def test_date_suffix_is_stripped(model: str, base: str) -> None:
    assert price_for(model, {}) == BUILTIN_PRICES[base]


@pytest.mark.parametrize(
    "model",
    ["gpt-4o-audio-preview", "gpt-4o-mini-tts", "claude-sonnet-4-6", "gpt-4", "x", "", None],
)
def test_no_prefix_matching_and_unknown_models_are_unpriced(model: str | None) -> None:
    assert price_for(model, {}) is None


def test_overrides_win_and_apply_to_dated_names() -> None:
    mine = ModelPrice(input=1.0, output=2.0)
    assert price_for("gpt-4o", {"gpt-4o": mine}) == mine
    assert price_for("gpt-4o-2024-08-06", {"gpt-4o": mine}) == mine
    assert price_for("gpt-4o-mini", {"gpt-4o-mini": mine}) == mine


def test_an_exact_dated_override_beats_the_undated_builtin() -> None:
    mine = ModelPrice(input=1.0, output=2.0)
    assert price_for("gpt-4o-2024-05-13", {"gpt-4o-2024-05-13": mine}) == mine


def test_cost_usd_per_million_tokens() -> None:
    price = ModelPrice(input=3.0, output=15.0)
    assert cost_usd(1_000_000, 1_000_000, price) == pytest.approx(18.0)
    assert cost_usd(1200, 80, price) == pytest.approx((1200 * 3 + 80 * 15) / 1e6)


def test_cache_tokens_default_to_the_input_price() -> None:
    price = ModelPrice(input=3.0, output=15.0)
    assert cost_usd(0, 0, price, cache_read_tokens=1_000_000) == pytest.approx(3.0)
    assert cost_usd(0, 0, price, cache_write_tokens=1_000_000) == pytest.approx(3.0)


def test_explicit_cache_prices_including_zero() -> None:
    price = ModelPrice(input=3.0, output=15.0, cache_read=0.0, cache_write=3.75)
    assert cost_usd(0, 0, price, 1_000_000, 1_000_000) == pytest.approx(3.75)


def test_negative_tokens_are_refused() -> None:
    with pytest.raises(ValueError):
        cost_usd(-1, 0, ModelPrice(input=3.0, output=15.0))


def test_the_default_judge_is_priced_so_a_budget_counts_its_spend() -> None:
    from core.matrix import JudgeConfig

    default = JudgeConfig.model_fields["model"].default
    assert price_for(default, {}) == ModelPrice(input=0.15, output=0.6, cache_read=0.075)
    assert price_for(f"{default}-2024-07-18", {}) == price_for(default, {})


def test_the_model_each_preset_asks_for_by_default_has_a_built_in_price() -> None:
    defaults = {name: p.default_model for name, p in PRESETS.items() if p.default_model}
    assert set(defaults) >= {"claude-code", "codex"}
    assert {name: price_for(model, {}) is not None for name, model in defaults.items()} == {
        name: True for name in defaults
    }


def test_a_preset_without_a_default_model_says_how_its_cli_picks_one() -> None:
    """validate warns with these words that the runs' cost cannot be known (a preset
    with neither would leave a tier's cost unknown and say nothing)."""
    for name, preset in PRESETS.items():
        if preset.calls_model:
            assert (preset.default_model is None) == (preset.model_choice is not None), name
    assert PRESETS["gemini-cli"].default_model is None
