"""core.evaluation.rejudge: a run judged or gated again keeps its agent's own outcome."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.evaluation.evaluate import Judging
from core.evaluation.rejudge import RejudgePlan, rejudge_run
from core.matrix import load_matrix
from core.results.run import GateResult, RunSpec, RunStatus
from tests.support.records import result_of


@pytest.mark.parametrize(
    ("agent_reason", "status"),
    [
        ("agent timed out after 3.0 s", RunStatus.timeout),
        ("agent exited with code 1: RuntimeError: agent blew up", RunStatus.agent_error),
    ],
)
def test_a_rescored_run_whose_judge_had_failed_gets_its_agents_status_back(
    tmp_path: Path, agent_reason: str, status: RunStatus
) -> None:
    # A judge error made the run an infrastructure error; gated again without a judge,
    # the run is what its agent made it: timed out, or exited with an error.
    (tmp_path / "matrix.yaml").write_text(
        "name: m\nruns_per_tier: 1\nagent: {kind: command, command: 'true'}\n"
        "tiers: [{id: T0}]\nscenarios: [{id: s0, prompt: go}]\n"
    )
    matrix = load_matrix(tmp_path / "matrix.yaml")
    spec = RunSpec(experiment_id="e", run_id="e:T0:s0:0", tier="T0", scenario="s0", run_index=0)
    result = result_of(
        spec, RunStatus.infra_error, fail_reason=f"judge error: unreachable; {agent_reason}"
    )
    plan = RejudgePlan(version=2, rescore=True, note="rescored")
    gate = GateResult(gate_type="command_succeeds", passed=True, message="exit code 0")
    again = rejudge_run(result, matrix, plan, Judging(environ={}), inputs=None, gates=[gate])
    assert again.status == status and not again.passed
    assert (again.fail_reason or "").startswith(agent_reason)
