"""RunResults -> ExperimentReport."""

from __future__ import annotations

import json
import math
import random

import pytest

from core.analysis.aggregate import ReportSettings, aggregate
from core.matrix import Scoring
from core.results.report import ExperimentInfo, ExperimentReport
from core.results.run import InteractionMetrics, ProcessMetrics, RunResult, RunStatus
from tests.support.experiments import make_run

SCORING = Scoring()


def _info(tiers: list[str], scenarios: list[str] | None = None) -> ExperimentInfo:
    return ExperimentInfo(
        id="exp",
        name="demo",
        created_at=1_700_000_000.0,
        tiers=tiers,
        scenarios=scenarios or ["s1"],
        total_runs=10,
    )


def _report(runs: list[RunResult], tiers: list[str]) -> ExperimentReport:
    return aggregate(_info(tiers), runs, ReportSettings(baseline=tiers[0], scoring=SCORING))


# --- ProjectScylla's examples ---------------------------------------------------------------


def test_seed_example_2_through_aggregation() -> None:
    outcomes = [True, True, False, True, True, True, False, True, True, True]
    runs = [make_run(index=i, passed=p, impl=0.9 if p else 0.2) for i, p in enumerate(outcomes)]
    tier = _report(runs, ["T0"]).tiers["T0"]
    assert tier.pass_rate.median == 1.0
    assert tier.pass_rate.mean == pytest.approx(0.8)
    assert tier.pass_rate.mode == 1.0
    assert (tier.pass_rate.min, tier.pass_rate.max) == (0.0, 1.0)
    assert tier.pass_rate.std_dev == pytest.approx(0.4)
    assert tier.passes == 8
    assert tier.composite_score.median == pytest.approx(0.95)
    assert tier.grade == "A"
    # mean cost 0.5 / mean pass rate 0.8
    assert tier.cost_of_pass == pytest.approx(0.625)


def test_seed_example_3_cross_tier() -> None:
    # composite = (1 + impl) / 2 gives medians 0.70, 0.80, 0.85, 0.90.
    medians = {"T0": 0.70, "T1": 0.80, "T2": 0.85, "T3": 0.90}
    runs = [
        make_run(tier, index=i, impl=2 * median - 1, cost=median)
        for tier, median in medians.items()
        for i in range(3)
    ]
    cross = _report(runs, list(medians)).cross_tier
    assert cross.baseline == "T0"
    assert {t: round(u, 3) for t, u in cross.tier_uplift.items() if u is not None} == {
        "T1": 0.143,
        "T2": 0.214,
        "T3": 0.286,
    }
    assert cross.uplift_note is None
    assert cross.cost_variance == pytest.approx(0.00546875)
    assert cross.cost_delta == pytest.approx(0.20)
    assert cross.pass_rate_variance == 0.0


def test_pass_rate_variance_across_tier_medians() -> None:
    runs = [make_run("T0", index=0, passed=False, impl=0.0), make_run("T1", index=0)]
    assert _report(runs, ["T0", "T1"]).cross_tier.pass_rate_variance == pytest.approx(0.25)


# --- edge cases --------------------------------------------------------------------------------


def test_no_runs() -> None:
    report = _report([], ["T0", "T1"])
    for tier in report.tiers.values():
        assert (tier.runs, tier.errors, tier.passes, tier.grade) == (0, 0, 0, None)
        assert tier.pass_rate.count == 0 and tier.pass_rate.median is None
        assert tier.cost_of_pass is None
        assert tier.scenarios["s1"].runs == 0
    assert report.cross_tier.tier_uplift == {"T1": None}
    assert "no valid runs" in (report.cross_tier.uplift_note or "")
    assert report.cross_tier.pass_rate_variance is None
    assert report.cross_tier.cost_delta is None
    assert report.experiment.completed_runs == 0


def test_one_run() -> None:
    tier = _report([make_run(impl=0.85)], ["T0"]).tiers["T0"]
    assert tier.composite_score.median == pytest.approx(0.925)
    assert tier.composite_score.std_dev == 0.0
    assert tier.grade == "B"
    assert tier.cost_of_pass == 0.5
    assert tier.cost_of_pass_per_run.median == 0.5


def test_all_failing_tier_has_infinite_cost_of_pass_that_survives_json() -> None:
    runs = [make_run(index=i, passed=False, impl=0.1, cost=0.2) for i in range(3)]
    report = _report(runs, ["T0"])
    tier = report.tiers["T0"]
    assert tier.cost_of_pass == math.inf
    assert tier.cost_of_pass_per_run.median == math.inf
    assert tier.grade == "F"
    text = report.model_dump_json()
    loaded = json.loads(text)  # strict JSON: no bare Infinity
    assert loaded["tiers"]["T0"]["cost_of_pass"] == "Infinity"
    assert loaded["tiers"]["T0"]["cost_of_pass_per_run"]["mean"] == "Infinity"
    assert ExperimentReport.model_validate_json(text) == report


def test_mixed_per_run_cost_of_pass() -> None:
    runs = [make_run(index=0, cost=0.2), make_run(index=1, cost=0.4, passed=False, impl=0.0)]
    tier = _report(runs, ["T0"]).tiers["T0"]
    assert tier.cost_of_pass == pytest.approx(0.3 / 0.5)
    per_run = tier.cost_of_pass_per_run
    assert (per_run.min, per_run.median, per_run.max) == (0.2, math.inf, math.inf)


def test_baseline_with_zero_composite_gives_no_uplift_and_says_why() -> None:
    runs = [make_run("T0", passed=False, impl=0.0), make_run("T1", impl=0.5)]
    cross = _report(runs, ["T0", "T1"]).cross_tier
    assert cross.tier_uplift == {"T1": None}
    assert cross.uplift_note is not None and "median composite score of 0" in cross.uplift_note


def test_tier_without_valid_runs_has_no_grade_and_no_uplift() -> None:
    runs = [make_run("T0"), make_run("T1", status=RunStatus.infra_error)]
    report = _report(runs, ["T0", "T1"])
    assert report.tiers["T1"].grade is None
    assert report.tiers["T1"].composite_score.count == 0
    assert report.cross_tier.tier_uplift == {"T1": None}
    assert "T1" in (report.cross_tier.uplift_note or "")


def test_nan_metric_is_rejected() -> None:
    with pytest.raises(ValueError):
        _report([make_run(impl=0.5).model_copy(update={"impl_rate": math.nan})], ["T0"])


def test_infra_errors_are_counted_but_kept_out_of_statistics() -> None:
    runs = [
        make_run(index=0, passed=False, impl=0.0),
        make_run(index=1, passed=False, impl=0.0, status=RunStatus.timeout),
        make_run(index=2, status=RunStatus.infra_error),
        make_run(index=3, status=RunStatus.infra_error),
    ]
    report = _report(runs, ["T0"])
    tier = report.tiers["T0"]
    assert (tier.runs, tier.errors, tier.passes) == (4, 2, 0)
    assert tier.pass_rate.count == 2 and tier.pass_rate.max == 0.0
    assert tier.cost_usd.count == 2
    assert tier.statuses == {"completed": 1, "timeout": 1, "infra_error": 2}
    assert tier.grade == "F"
    info = report.experiment
    assert (info.completed_runs, info.errors, info.passes) == (4, 2, 0)


def test_unknown_cost_is_counted_not_priced_at_zero() -> None:
    runs = [
        make_run(index=0, cost=0.4),
        make_run(index=1, cost=None, cost_unknown_reason="no price"),
    ]
    tier = _report(runs, ["T0"]).tiers["T0"]
    assert tier.cost_unknown_runs == 1
    assert tier.cost_usd.count == 1 and tier.cost_usd.mean == 0.4
    assert tier.cost_of_pass_per_run.count == 1


def test_no_known_cost_leaves_cost_of_pass_unknown() -> None:
    report = _report([make_run(cost=None), make_run("T1", cost=None)], ["T0", "T1"])
    assert report.tiers["T0"].cost_of_pass is None
    assert report.cross_tier.cost_variance is None
    assert report.cross_tier.cost_delta is None


def test_custom_grade_scale() -> None:
    scoring = Scoring(grades={"good": 0.9, "meh": 0.5, "bad": 0.0})
    runs = [make_run(impl=0.4)]  # composite 0.7
    report = aggregate(_info(["T0"]), runs, ReportSettings(baseline="T0", scoring=scoring))
    assert report.tiers["T0"].grade == "meh"
    assert report.tiers["T0"].scenarios["s1"].grade == "meh"


# --- breakdowns ----------------------------------------------------------------------------------


def test_tier_by_scenario_breakdown() -> None:
    runs = [
        make_run(scenario="s1", index=0),
        make_run(scenario="s1", index=1),
        make_run(scenario="s2", index=0, passed=False, impl=0.0),
    ]
    report = aggregate(
        _info(["T0"], ["s1", "s2"]), runs, ReportSettings(baseline="T0", scoring=SCORING)
    )
    tier = report.tiers["T0"]
    assert list(tier.scenarios) == ["s1", "s2"]
    assert tier.scenarios["s1"].pass_rate.mean == 1.0
    assert tier.scenarios["s2"].pass_rate.mean == 0.0
    assert tier.scenarios["s2"].grade == "F"
    assert tier.pass_rate.mean == pytest.approx(2 / 3)
    assert tier.scenarios["s1"].scenarios == {}


def test_orders_put_unlisted_tiers_and_scenarios_last_sorted() -> None:
    runs = [
        make_run("T9"),
        make_run("T0"),
        make_run("T5", scenario="zz"),
        make_run("T0", scenario="aa"),
    ]
    report = aggregate(
        _info(["T0"]),
        runs,
        ReportSettings(baseline="T0", scoring=SCORING, tier_order=["T0"], scenario_order=["s1"]),
    )
    assert list(report.tiers) == ["T0", "T5", "T9"]
    assert list(report.tiers["T0"].scenarios) == ["s1", "aa", "zz"]
    assert list(report.cross_tier.tier_uplift) == ["T5", "T9"]


def test_layered_composite_only_when_runs_have_one() -> None:
    plain = _report([make_run()], ["T0"]).tiers["T0"]
    assert plain.layered_composite is None
    layered = _report([make_run(layered_composite=0.6), make_run(index=1)], ["T0"]).tiers["T0"]
    assert layered.layered_composite is not None
    assert (layered.layered_composite.count, layered.layered_composite.median) == (1, 0.6)


def test_interaction_process_token_and_judge_statistics() -> None:
    runs = [
        make_run(
            index=i,
            interaction=InteractionMetrics(
                total_commands=4 + i, error_rate=0.25 * i, first_try_success_rate=0.5
            ),
            process=ProcessMetrics(r_prog=0.5 * i) if i < 2 else None,
            input_tokens=1000 * (i + 1),
            base_context=900,
            context_growth_avg=50.0 * i,
            judge_cost_usd=0.01 if i == 0 else None,
        )
        for i in range(3)
    ]
    tier = _report(runs, ["T0"]).tiers["T0"]
    assert set(tier.interaction) == {
        "error_rate", "retry_rate", "first_try_success_rate", "iteration_ratio",
        "help_invocations", "total_commands",
    }  # fmt: skip
    assert tier.interaction["total_commands"].median == 5.0
    assert tier.interaction["error_rate"].max == 0.5
    assert set(tier.process) == {"r_prog"}
    assert tier.process["r_prog"].count == 2 and tier.process["r_prog"].mean == 0.25
    assert tier.input_tokens.mean == 2000.0
    assert tier.base_context.median == 900.0
    assert tier.context_growth_avg.max == 100.0
    assert tier.judge_cost_usd.count == 1
    assert tier.duration_seconds.median == 11.0


# --- determinism and JSON ------------------------------------------------------------------------


def _varied_runs() -> list[RunResult]:
    rng = random.Random(7)
    statuses = [RunStatus.completed, RunStatus.timeout, RunStatus.infra_error]
    return [
        make_run(
            tier,
            scenario,
            i,
            passed=rng.random() < 0.6,
            impl=round(rng.random(), 3),
            cost=rng.choice([None, round(rng.random(), 4)]),
            status=rng.choice(statuses),
            layered_composite=rng.random(),
        )
        for tier in ("T0", "T1", "T2")
        for scenario in ("s1", "s2")
        for i in range(5)
    ]


def test_same_runs_in_any_order_give_identical_json() -> None:
    runs = _varied_runs()
    info = _info(["T0", "T1", "T2"], ["s1", "s2"])
    first = aggregate(info, runs, ReportSettings(baseline="T1", scoring=SCORING)).model_dump_json()
    shuffled = runs[:]
    random.Random(1).shuffle(shuffled)
    assert (
        aggregate(info, shuffled, ReportSettings(baseline="T1", scoring=SCORING)).model_dump_json()
        == first
    )


def test_report_json_round_trip() -> None:
    runs = [*_varied_runs(), make_run("T3", passed=False, impl=0.0)]
    report = aggregate(
        _info(["T0", "T1", "T2", "T3"], ["s1", "s2"]),
        runs,
        ReportSettings(baseline="T0", scoring=SCORING),
    )
    text = report.model_dump_json()
    loaded = ExperimentReport.model_validate_json(text)
    assert loaded == report
    assert loaded.model_dump_json() == text


def test_aggregate_leaves_other_experiment_fields_alone() -> None:
    info = _info(["T0"]).model_copy(update={"finished_at": 5.0, "total_runs": 99})
    report = aggregate(info, [make_run()], ReportSettings(baseline="T0", scoring=SCORING))
    assert report.experiment.finished_at == 5.0
    assert report.experiment.total_runs == 99
    assert report.experiment.completed_runs == 1
    assert info.completed_runs == 0


def test_a_dead_judge_is_one_infrastructure_error_whatever_the_gates_said() -> None:
    """The gates that failed besides are not part of the error: one reason, counted 3
    times (fail-fast keys its health by the same error_key)."""
    from core.analysis.aggregate import error_reasons
    from core.analysis.columns import Group

    dead = "judge error: connection failed after 3 attempts: ConnectError"
    reasons = [dead, f"{dead}; gates failed: no_transcript_errors", f"{dead}; gates failed: a, b"]
    runs = [
        make_run(index=i, passed=False, status=RunStatus.infra_error, fail_reason=reason)
        for i, reason in enumerate(reasons)
    ]
    assert error_reasons(Group.of(runs)) == {dead: 3}


def test_a_budget_notice_keeps_small_spends_apart_from_their_limit() -> None:
    from core.analysis.aggregate import budget_report
    from core.analysis.columns import Group
    from core.matrix import Budget

    runs = Group.of(
        [make_run(index=0, cost=0.0166), make_run(index=1, cost=0.01), make_run(index=2, cost=None,
         status=RunStatus.not_run)]
    )  # fmt: skip
    small = budget_report(Budget(agent_usd=0.03, judge_usd=2), runs)
    assert (
        small.notice
        == "budget reached: $0.0266 of $0.03 spent, judge $0.00 of $2.00 spent, 1 run not run"
    )
    large = budget_report(Budget(agent_usd=1250), Group.of([make_run(cost=1234.5)]))
    assert large.notice == "budget: $1,234.50 of $1,250.00 spent"


@pytest.mark.parametrize(
    ("costs", "limit", "spends"),
    [
        ([0.250629, 0.250629], 0.5, "$0.5013 of $0.50"),  # read "$0.5 of $0.5"
        ([0.2, 0.29999], 0.5, "$0.49999 of $0.50"),
        ([0.25, 0.25], 0.5, "$0.50 of $0.50"),
        ([3.0, 3.004], 6, "$6.004 of $6.00"),
        ([0.1, 0.2], 0.3, "$0.30 of $0.30"),  # a float sum off in its 17th digit
        ([0.00001234], 0.03, "$0.000012 of $0.03"),
    ],
)
def test_a_budget_notice_never_shows_a_spend_as_its_ceiling_when_it_is_not(
    costs: list[float], limit: float, spends: str
) -> None:
    from core.analysis.aggregate import budget_report
    from core.analysis.columns import Group
    from core.matrix import Budget

    runs = Group.of([make_run(index=i, cost=c) for i, c in enumerate(costs)])
    assert budget_report(Budget(agent_usd=limit), runs).notice == f"budget: {spends} spent"


def test_rewards_per_tier_and_scenario_with_a_missing_one_counted_zero() -> None:
    runs = [
        make_run(scenario="s1", index=0, rewards={"correct": 1.0, "style": 0.5}),
        make_run(scenario="s1", index=1, passed=False, rewards={"correct": 0.0, "style": 1.0}),
        # Its verifier wrote nothing: it earned none of either reward.
        make_run(scenario="s1", index=2, passed=False),
        make_run(scenario="s2", index=0, rewards={"reward": 0.25}),
        # Kept out like every infrastructure error.
        make_run(scenario="s2", index=1, status=RunStatus.infra_error, rewards={"reward": 1.0}),
    ]
    tier = aggregate(
        _info(["T0"], ["s1", "s2"]), runs, ReportSettings(baseline="T0", scoring=SCORING)
    ).tiers["T0"]
    assert list(tier.rewards) == ["correct", "reward", "style"]
    correct = tier.rewards["correct"]
    assert (correct.stats.count, correct.stats.mean) == (3, pytest.approx(1 / 3))
    assert tier.rewards["style"].stats.mean == pytest.approx(0.5)
    # Only the scenario that gives a reward counts toward it.
    assert (tier.rewards["reward"].stats.count, tier.rewards["reward"].stats.mean) == (1, 0.25)
    assert tier.scenarios["s2"].rewards["reward"].stats.max == 0.25
    assert "correct" not in tier.scenarios["s2"].rewards
    for reward in tier.rewards.values():
        assert reward.mean_ci is not None
        low, high = reward.mean_ci.low, reward.mean_ci.high
        assert reward.stats.min <= low <= reward.stats.mean <= high <= reward.stats.max  # type: ignore[operator]


def test_the_rewards_table_is_in_markdown_and_html_only_when_a_verifier_gave_rewards() -> None:
    from scheduler.report.render import render

    plain = _report([make_run(index=0)], ["T0"])
    assert "Rewards" not in render(plain, "markdown")
    scored = _report(
        [make_run(index=0, rewards={"correct": 1.0}), make_run(index=1, rewards={"correct": 0.5})],
        ["T0"],
    )
    markdown = render(scored, "markdown")
    assert "Rewards (benchmark tasks' verifiers)" in markdown
    assert "| T0 | (all) | correct | 0.750 [0.500, 1.000] | 0.750 | 0.500 - 1.000 | 2 |" in markdown
    html = render(scored, "html")
    assert '<td class="label">correct</td><td>0.750 <span class="interval">[0.500, 1.000]' in html
