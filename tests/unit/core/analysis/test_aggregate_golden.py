"""The whole report of a varied experiment, byte for byte against the one stored in
tests/fixtures/aggregate_golden.json.

Aggregation is written for speed (core.analysis.columns reads each run once); this
pins every number it reports so that no rewrite changes one unnoticed. The runs
cover what the per-run reads branch on: every status, unknown and zero costs,
never-passing runs (an infinite cost of pass), judged runs with and without
repeats or a score, process metrics some runs lack, LLM calls of varied
lengths, a layered composite on some runs, -0.0, tied scores, a tier missing a
scenario, a tier the matrix does not list and a listed one without runs.

A change to the report's content that is meant (a new field, a new figure)
regenerates the file: `python -m tests.unit.core.analysis.test_aggregate_golden`, and the diff is
reviewed with the change.
"""

from __future__ import annotations

import random

import pytest

from core.analysis.aggregate import ReportSettings, aggregate
from core.matrix import Budget, Scoring
from core.results.report import ExperimentInfo, ExperimentReport
from core.results.run import (
    GateResult,
    InteractionMetrics,
    JudgeResult,
    ProcessMetrics,
    RunResult,
    RunStatus,
)
from core.results.transcript import LLMCallMetrics
from tests.conftest import FIXTURES

GOLDEN = FIXTURES / "aggregate_golden.json"
TIERS = ["T0", "T1", "T2", "T3"]  # T3: listed, no runs; T9 runs without being listed
SCENARIOS = ["s0", "s1", "s2"]
# A varied mix, completed most often, as in a real experiment.
STATUSES = [RunStatus.completed] * 12 + [
    RunStatus.agent_error,
    RunStatus.timeout,
    RunStatus.limit,
    RunStatus.infra_error,
    RunStatus.cancelled,
    RunStatus.not_run,
]
REASONS = ["judge unreachable: 503", "setup failed\ndetails", "docker: no such image"]


def _run(rng: random.Random, tier: str, scenario: str, index: int, skill: float) -> RunResult:
    status = rng.choice(STATUSES)
    gates = [rng.random() < skill for _ in range(rng.randint(0, 3))]
    passed = status is RunStatus.completed and all(gates)
    impl = round(sum(gates) / len(gates), 2) if gates else rng.choice([0.0, -0.0, 1.0])
    cost = rng.choice([None, 0.0, round(rng.uniform(0.01, 2), 3), round(rng.uniform(0.01, 2), 6)])
    judge = None
    if rng.random() < 0.5:
        repeats = rng.choice([1, 3])
        scores = [round(rng.random(), 3) for _ in range(repeats)] if rng.random() < 0.9 else []
        judge = JudgeResult(
            model="j",
            pass_threshold=0.5,
            weighted_score=sum(scores) / len(scores) if scores else None,
            scores=scores if repeats > 1 else [],
            repeats=repeats,
            cached=rng.randint(0, repeats),
            cost_usd=rng.choice([None, 0.002]),
        )
    process = None
    if rng.random() < 0.4:
        process = ProcessMetrics(
            r_prog=rng.choice([None, round(rng.random(), 2)]),
            strategic_drift=rng.choice([None, 0.0, 0.25]),
        )
    return RunResult(
        experiment_id="exp",
        run_id=f"exp:{tier}:{scenario}:{index}",
        tier=tier,
        scenario=scenario,
        run_index=index,
        status=status,
        fail_reason=rng.choice(REASONS) if status is RunStatus.infra_error else None,
        passed=passed,
        pass_rate=float(passed),
        impl_rate=impl,
        composite_score=(float(passed) + impl) / 2,
        layered_composite=rng.choice([None, None, round(rng.random(), 1)]),
        cost_usd=cost,
        judge_cost_usd=None if judge is None else judge.cost_usd,
        duration_seconds=rng.choice([5.0, round(rng.uniform(1, 90), 3)]),
        ended_at=1_700_000_000.0 + index,
        input_tokens=rng.randint(0, 5000),
        output_tokens=rng.choice([0, 100, rng.randint(0, 900)]),
        base_context=rng.choice([None, 1000, rng.randint(500, 2000)]),
        context_growth_avg=rng.choice([None, -0.0, 0.0, round(rng.uniform(0, 300), 1)]),
        llm_calls=[
            LLMCallMetrics(input_tokens=rng.randint(100, 9000), output_tokens=10)
            for _ in range(rng.choice([0, 1, 2, 5]))
        ],
        interaction=InteractionMetrics(
            total_commands=rng.randint(0, 30),
            help_invocations=rng.choice([0, 0, 1, 2]),
            error_rate=rng.choice([0.0, 0.1, round(rng.random(), 2)]),
            retry_rate=round(rng.random(), 2),
            first_try_success_rate=rng.choice([1.0, 0.5]),
            iteration_ratio=rng.choice([1.0, 1.5]),
            exit_codes_approximate=rng.random() < 0.2,
        ),
        gates=[GateResult(gate_type="command_succeeds", passed=g, message="m") for g in gates],
        gates_passed=sum(gates),
        gates_total=len(gates),
        judge=judge,
        process=process,
    )


def runs() -> list[RunResult]:
    rng = random.Random(2026)
    cells = [(t, s) for t in ("T0", "T1", "T2") for s in SCENARIOS if (t, s) != ("T2", "s2")]
    cells.append(("T9", "s1"))
    skill = {"T0": 0.5, "T1": 0.75, "T2": 0.55, "T9": 0.9}
    result = [
        _run(rng, tier, scenario, i, skill[tier])
        for tier, scenario in cells
        for i in range(rng.choice([12, 40, 90]))
    ]
    rng.shuffle(result)  # as Redis hands them back: in no particular order
    return result


def report() -> ExperimentReport:
    """The report with a budget, its tests corrected by Benjamini-Hochberg, as the chord
    body makes it."""
    info = ExperimentInfo(
        id="exp", name="golden", created_at=1_700_000_000.0, tiers=TIERS, scenarios=SCENARIOS
    )
    return aggregate(
        info,
        runs(),
        ReportSettings(
            baseline="T0",
            scoring=Scoring(pass_weight=0.4, impl_weight=0.6),
            correction="bh",
            budget=Budget(agent_usd=100.0, judge_usd=1.0),
        ),
    )


def _text(made: ExperimentReport) -> str:
    # Indented: a meant change shows in the file's diff value by value.
    return made.model_dump_json(indent=1) + "\n"


def test_the_report_of_a_varied_experiment_is_the_stored_one_byte_for_byte() -> None:
    made = _text(report())
    if made != GOLDEN.read_text():
        pytest.fail(
            "the report differs from tests/fixtures/aggregate_golden.json; if the change is "
            "meant, regenerate it (python -m tests.unit.core.analysis.test_aggregate_golden) and "
            "review the diff"
        )


if __name__ == "__main__":
    GOLDEN.write_text(_text(report()))
