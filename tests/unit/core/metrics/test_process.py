"""Process metrics from commands, and token tracking by prompt component."""

from __future__ import annotations

import pytest

from core.matrix import ExpectedStep, ModelPrice, ProcessConfig
from core.metrics.process import (
    change_fail_percentage,
    pr_revert_rate,
    process_metrics,
    r_prog,
    strategic_drift,
    strategic_drift_binary,
)
from core.metrics.tokens import token_metrics
from core.results.run import ProcessMetrics
from core.results.transcript import CommandRecord, ComponentTokens, ComponentType


def _commands(*pairs: tuple[str, int | None]) -> list[CommandRecord]:
    return [CommandRecord(command=text, exit_code=code) for text, code in pairs]


# --- formula functions -----------------------------------------------------------------------


def test_r_prog_is_achieved_over_expected() -> None:
    assert r_prog(3.0, 4.0) == 0.75
    assert r_prog(0, 2) == 0.0
    with pytest.raises(ValueError):
        r_prog(5, 4)
    with pytest.raises(ValueError):
        r_prog(0, 0)


def test_weighted_strategic_drift() -> None:
    # 1 - (1*2 + 0*1 + 0.5*2) / 5
    assert strategic_drift([1.0, 0.0, 0.5], [2.0, 1.0, 2.0]) == pytest.approx(0.4)
    with pytest.raises(ValueError):
        strategic_drift([1.0], [1.0, 1.0])
    with pytest.raises(ValueError):
        strategic_drift([1.5], [1.0])


def test_binary_strategic_drift() -> None:
    assert strategic_drift_binary(3, 4) == pytest.approx(0.25)
    assert strategic_drift_binary(0, 4) == 1.0


def test_change_fail_and_revert_rates() -> None:
    assert change_fail_percentage(1, 10) == pytest.approx(0.1)
    assert pr_revert_rate(1, 4) == 0.25
    with pytest.raises(ValueError):
        pr_revert_rate(1, 0)


# --- process_metrics over a run's commands ----------------------------------------------------


def test_progress_weighs_expected_steps() -> None:
    config = ProcessConfig(
        expected_steps=[
            ExpectedStep(pattern=r"my-tool create", weight=3.0),
            ExpectedStep(pattern=r"my-tool link", weight=1.0),
        ]
    )
    commands = _commands(("my-tool create --title a", 0), ("my-tool create --title b", 0))
    result = process_metrics(commands, config)
    assert result.r_prog == 0.75
    assert result.r_prog_simple == 0.5


def test_progress_with_no_commands_is_zero() -> None:
    config = ProcessConfig(expected_steps=[ExpectedStep(pattern="x")])
    assert process_metrics([], config).r_prog == 0.0


def test_drift_counts_commands_off_the_goal() -> None:
    config = ProcessConfig(goal_patterns=[r"my-tool (create|link)"])
    commands = _commands(
        ("my-tool create a", 0), ("my-tool link a b", 0), ("ls -la", 0), ("my-tool create b", 1)
    )
    result = process_metrics(commands, config)
    assert result.strategic_drift_binary == pytest.approx(0.25)
    assert result.strategic_drift == result.strategic_drift_binary


def test_change_fail_ignores_changes_of_unknown_outcome() -> None:
    config = ProcessConfig(change_patterns=[r"^git commit"])
    commands = _commands(
        ("git commit -m a", 0), ("git commit -m b", 1), ("git commit -m c", None), ("ls", 2)
    )
    assert process_metrics(commands, config).change_fail_percentage == 0.5


def test_missing_inputs_leave_metrics_undefined() -> None:
    commands = _commands(("anything", 1))
    assert process_metrics(commands, ProcessConfig()) == ProcessMetrics()
    no_changes = ProcessConfig(change_patterns=["git push"], goal_patterns=["x"])
    result = process_metrics([], no_changes)
    assert result.change_fail_percentage is None
    assert result.strategic_drift is None
    assert result.pr_revert_rate is None


# --- token tracking --------------------------------------------------------------------------


def test_component_types_are_the_seeds_ten() -> None:
    assert {c.value for c in ComponentType} == {
        "SYSTEM_PROMPT", "SKILL_PROMPT", "DOMAIN_EXPERTISE", "TOOL_SCHEMA", "TOOL_CALL",
        "TOOL_RESPONSE", "ORCHESTRATOR", "SUB_AGENT", "MONITOR", "EVALUATOR",
    }  # fmt: skip


def _parts(*pairs: tuple[ComponentType, int]) -> list[ComponentTokens]:
    return [ComponentTokens(component=kind, tokens=tokens) for kind, tokens in pairs]


def test_schema_overhead_and_skill_efficiency() -> None:
    parts = _parts(
        (ComponentType.TOOL_SCHEMA, 5400),
        (ComponentType.SKILL_PROMPT, 1000),
        (ComponentType.SYSTEM_PROMPT, 500),
        (ComponentType.TOOL_SCHEMA, 600),
        (ComponentType.DOMAIN_EXPERTISE, 500),
    )
    result = token_metrics(parts, ModelPrice(input=3.0, output=15.0))
    assert result.schema_overhead == 6000
    assert result.skill_tokens == 1500
    assert result.skill_efficiency == pytest.approx(0.2)
    assert result.token_efficiency_ratio == pytest.approx(4.0)
    assert result.by_component[ComponentType.TOOL_SCHEMA] == 6000
    assert result.cost_by_component[ComponentType.TOOL_SCHEMA] == pytest.approx(6000 * 3.0 / 1e6)
    assert result.percentage_by_component[ComponentType.TOOL_SCHEMA] == pytest.approx(
        100 * 6000 / 8000
    )
    assert sum(result.percentage_by_component.values()) == pytest.approx(100.0)


def test_components_come_in_seed_order_whatever_the_input_order() -> None:
    parts = _parts((ComponentType.EVALUATOR, 1), (ComponentType.SYSTEM_PROMPT, 2))
    result = token_metrics(parts, None)
    assert list(result.by_component) == [ComponentType.SYSTEM_PROMPT, ComponentType.EVALUATOR]
    assert result.model_dump_json() == token_metrics(parts[::-1], None).model_dump_json()


def test_unknown_price_leaves_component_costs_empty() -> None:
    result = token_metrics(_parts((ComponentType.TOOL_SCHEMA, 100)), None)
    assert result.cost_by_component == {}
    assert result.skill_efficiency == 0.0
    assert result.token_efficiency_ratio is None


def test_no_components_leave_ratios_undefined() -> None:
    result = token_metrics([], ModelPrice(input=3.0, output=15.0))
    assert result.skill_efficiency is None
    assert result.token_efficiency_ratio is None
    assert result.percentage_by_component == {}
    assert result.schema_overhead == 0


def test_pure_skills_have_full_efficiency() -> None:
    result = token_metrics(_parts((ComponentType.SKILL_PROMPT, 800)), None)
    assert result.skill_efficiency == 1.0
    assert result.token_efficiency_ratio == 0.0
