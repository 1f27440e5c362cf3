"""Finished experiments written straight into a store, for report and compare tests,
and single RunResults for the aggregation and analysis tests.

The experiment is planned from a real matrix file, its runs are stored as
workers store them, and the report comes from the workers' own aggregation
(fleet.finish.finish_experiment): only the agent runs are skipped.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from core.evidence.models import RunEvidence
from core.matrix import load_matrix
from core.metrics import formulas
from core.results.run import InteractionMetrics, ProcessMetrics, RunResult, RunSpec, RunStatus
from core.results.transcript import LLMCallMetrics
from core.store import Store
from scheduler.plan import experiment_info, new_experiment_id, plan
from tests.conftest import shared_with_agents


def make_run(
    tier: str = "T0",
    scenario: str = "s1",
    index: int = 0,
    *,
    passed: bool = True,
    impl: float = 1.0,
    composite: float | None = None,
    cost: float | None = 0.5,
    status: RunStatus = RunStatus.completed,
    **extra: object,
) -> RunResult:
    """A finished run as a worker stores it; the composite by ProjectScylla's formula
    with equal weights unless given."""
    pass_rate = formulas.pass_rate(passed)
    if composite is None:
        composite = formulas.composite_score(pass_rate, impl, 0.5, 0.5)
    return RunResult(
        experiment_id="exp",
        run_id=f"{tier}:{scenario}:{index}",
        tier=tier,
        scenario=scenario,
        run_index=index,
        status=status,
        passed=passed,
        pass_rate=pass_rate,
        impl_rate=impl,
        composite_score=composite,
        cost_usd=cost,
        duration_seconds=10.0 + index,
        **extra,
    )


@dataclass(frozen=True)
class Cell:
    """The runs of one tier x scenario: pass or fail each, and what they looked like."""

    passed: tuple[bool, ...]
    error_rate: float = 0.0
    help_invocations: int = 0
    first_try_success_rate: float = 1.0
    context: tuple[int, ...] = (1000, 1500, 2000)  # input tokens of each LLM call
    # Run index -> a status other than completed (such a run never passes).
    statuses: dict[int, RunStatus] = field(default_factory=dict)
    # The impl rate of passing runs (1.0: composite 1.0); None: distinct scores.
    pass_impl: float | None = None
    # Every run's impl rate, in run order (over pass_impl); and every run's cost.
    impls: tuple[float, ...] | None = None
    cost: float | None = None
    # No price for the model: every run's cost is unknown.
    unpriced: bool = False
    # The model of each LLM call in turn (the run's own: the first), as a CLI that picks
    # its model for each request records them; none named when empty.
    models: tuple[str, ...] = ()
    # Run index -> why it failed (its fail_reason).
    reasons: dict[int, str] = field(default_factory=dict)
    # Every run's process metrics (a scenario with `process:`).
    process: ProcessMetrics | None = None


def impl_rate(passed: bool, index: int) -> float:
    """Distinct scores (no ties) so rank tests see an order: passes score higher."""
    return (0.6 if passed else 0.1) + 0.01 * index


def seed_experiment(
    store: Store,
    folder: Path,
    cells: dict[tuple[str, str], Cell],
    name: str = "demo",
    matrix_keys: dict[str, object] | None = None,
    created_at: float = 1_700_000_000.0,
) -> str:
    """Store a finished experiment with these runs (`matrix_keys`: more top-level keys);
    returns its id."""
    tiers = list(dict.fromkeys(t for t, _ in cells))
    scenarios = list(dict.fromkeys(s for _, s in cells))
    runs = {len(c.passed) for c in cells.values()}
    assert len(runs) == 1, "every cell needs the same number of runs"
    folder.mkdir(parents=True, exist_ok=True)
    matrix_file = folder / f"{len(list(folder.iterdir()))}.yaml"
    matrix_file.write_text(
        json.dumps(
            {
                "name": name,
                "runs_per_tier": runs.pop(),
                "agent": {"kind": "command", "command": "true", "model": "claude-sonnet-4"},
                "tiers": [{"id": t} for t in tiers],
                "scenarios": [{"id": s, "prompt": "go"} for s in scenarios],
                **(matrix_keys or {}),
            }
        )
    )
    matrix = load_matrix(matrix_file)
    exp_id = new_experiment_id(matrix)
    specs = list(plan(matrix, exp_id))
    info = experiment_info(matrix, exp_id, len(specs), created_at=created_at)
    store.experiments.create(info, matrix, specs)
    for spec in specs:  # each with its evidence, as a worker stores them
        store.results.save(_result(spec, cells[spec.tier, spec.scenario]))
        store.evidence.save(RunEvidence(experiment_id=exp_id, run_id=spec.run_id))
    from fleet.finish import finish_experiment

    finish_experiment(store, exp_id)
    return exp_id


def _result(spec: RunSpec, cell: Cell) -> RunResult:
    index = spec.run_index
    status = cell.statuses.get(index, RunStatus.completed)
    passed = cell.passed[index] and status is RunStatus.completed
    pass_rate = formulas.pass_rate(passed)
    if cell.impls is not None:
        impl = cell.impls[index]
    elif passed and cell.pass_impl is not None:
        impl = cell.pass_impl
    else:
        impl = impl_rate(passed, index)
    models = cell.models or (None,)
    calls = formulas.with_cumulative_input(
        [
            LLMCallMetrics(input_tokens=tokens, output_tokens=50, model=models[i % len(models)])
            for i, tokens in enumerate(cell.context)
        ]
    )
    return RunResult(
        experiment_id=spec.experiment_id,
        run_id=spec.run_id,
        tier=spec.tier,
        scenario=spec.scenario,
        run_index=index,
        status=status,
        fail_reason=cell.reasons.get(index),
        passed=passed,
        pass_rate=pass_rate,
        impl_rate=impl,
        composite_score=formulas.composite_score(pass_rate, impl, 0.5, 0.5),
        cost_usd=None
        if cell.unpriced
        else 0.01 + 0.001 * index
        if cell.cost is None
        else cell.cost,
        duration_seconds=2.0,
        started_at=1_700_000_000.0 + index,
        ended_at=1_700_000_002.0 + index,
        llm_calls=calls,
        model=models[0],
        base_context=formulas.base_context(calls),
        context_growth_avg=formulas.context_growth_avg(calls),
        interaction=InteractionMetrics(
            total_commands=4,
            error_rate=cell.error_rate,
            help_invocations=cell.help_invocations,
            first_try_success_rate=cell.first_try_success_rate,
            completed=True,
        ),
        process=cell.process,
    )


def command_matrix(
    folder: Path,
    command: str,
    *,
    runs: int = 1,
    timeout_s: float = 60,
    setup: list[str] | None = None,
    gates: str = "[{type: file_exists, path: out.txt}]",
    extra: str = "",
    pass_env: Sequence[str] = (),
    agent: str = "",
) -> Path:
    """matrix.yaml of one tier and one scenario whose agent is `command`.

    `extra` is more top-level YAML (say `lease_s: 5`); `agent`, more keys of the agent
    (say `sandbox: none`); `pass_env`, the worker variables the agent gets (a secret the
    test gives the worker, for the agent to leak).
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "matrix.yaml"
    path.write_text(f"""
name: t
runs_per_tier: {runs}
agent: {{kind: command, command: {json.dumps(command)}, timeout_s: {timeout_s},
        pass_env: {json.dumps(list(pass_env))}{", " + agent if agent else ""}}}
tiers: [{{id: T0}}]
scenarios:
  - id: s
    prompt: go
    setup: {json.dumps(setup or [])}
    evaluation: {{gates: {gates}}}
{extra}
""")
    return path


def judged_matrix(
    folder: Path, base_url: str, *, runs: int = 3, tiers: str = "T0, T1", repeats: int = 3
) -> Path:
    """matrix.yaml of judged runs: the agent prints `run=TIER/INDEX;` (a marker for
    tests.support.llm_stub.scripted_judge), passes its gate and notes each start in
    FOLDER/agent-starts.log; the judge (model judge-a) is at `base_url`. The prompt
    names a fresh token: the judgment cache outlives the experiment, and another
    test's identical runs would be answered from it. The log is shared with the
    agents' users (tests.conftest.shared_with_agents)."""
    (folder / "rubric.yaml").write_text("criteria: [{id: quality, weight: 1, description: q}]\n")
    ids = ", ".join(f"{{id: {t.strip()}}}" for t in tiers.split(","))
    matrix = folder / "matrix.yaml"
    starts = f"echo started >> {shared_with_agents(folder / 'agent-starts.log')}"
    matrix.write_text(f"""
name: judged
runs_per_tier: {runs}
agent:
  kind: command
  command: 'echo "run=$EVALFLEET_TIER/$EVALFLEET_RUN_INDEX;"; touch out.txt; {starts}'
  timeout_s: 30
tiers: [{ids}]
judge: {{base_url: "{base_url}", model: judge-a, api_key_env: null, max_attempts: 1,
         repeats: {repeats}}}
scenarios:
  - id: s
    prompt: "go ({uuid.uuid4().hex})"
    evaluation:
      gates: [{{type: file_exists, path: out.txt}}]
      judge: {{rubric: rubric.yaml, pass_threshold: 0.7}}
""")
    return matrix
