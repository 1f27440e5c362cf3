"""A run evaluated end to end in `core` alone: workspace, transcript, gates, judge."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from core.evaluation.evaluate import (
    UNSCORED,
    AgentOutput,
    EvaluationContext,
    GateSite,
    evaluate_run,
)
from core.matrix import load_matrix
from core.results.run import RunResult, RunSpec, RunStatus
from core.results.transcript import AgentOutcome
from tests.conftest import EXAMPLES
from tests.support.llm_stub import LLMStub, reply

# The `workspace` fixture: the run folder and the environment its commands get.
Workspace = tuple[Path, dict[str, str]]

RUBRIC = """\
criteria:
  - {id: correctness, weight: 0.75, description: right commands}
  - {id: efficiency, weight: 0.25, description: few commands}
"""


def matrix_text(base_url: str, gates: str, composite: str = "") -> str:
    return f"""
name: core-e2e
agent: {{command: "true", model: claude-sonnet-4, transcript: events-jsonl}}
tiers: [{{id: T0}}]
scenarios:
  - id: notes
    prompt: "Create two notes."
    target: {{command_pattern: 'my-tool\\s+(\\S+)'}}
    evaluation:
      gates: {gates}
      judge: {{rubric: rubric.yaml, pass_threshold: 0.6}}
      {composite}
    process:
      expected_steps: [{{pattern: 'my-tool create', weight: 2}}, {{pattern: 'my-tool link'}}]
      goal_patterns: ['my-tool (create|list)']
judge: {{base_url: "{base_url}", model: judge-mini, api_key_env: TEST_JUDGE_KEY}}
pricing: {{judge-mini: {{input: 1.0, output: 2.0}}}}
"""


GATES = """
        - {type: command_json_path, command: "my-tool list --format json", path: "$",
           assertion: "len >= 2"}
        - {type: file_exists, path: ".my-tool/store.json"}
        - {type: command_succeeds, command: "my-tool show n9"}
        - {type: no_transcript_errors}"""


def events(lines: list[dict]) -> str:
    return "".join(json.dumps(line) + "\n" for line in lines)


AGENT_EVENTS = [
    {"type": "component", "component": "SYSTEM_PROMPT", "tokens": 800},
    {"type": "component", "component": "TOOL_SCHEMA", "tokens": 300},
    {"type": "component", "component": "SKILL_PROMPT", "tokens": 100},
    {
        "type": "llm_call",
        "input_tokens": 1000,
        "output_tokens": 50,
        "latency_ms": 700,
        "tool_calls": 1,
    },
    {"type": "tool_call", "id": "a", "command": "my-tool new --title x"},
    {"type": "tool_result", "id": "a", "exit_code": 2},
    {
        "type": "llm_call",
        "input_tokens": 1300,
        "output_tokens": 60,
        "latency_ms": 650,
        "tool_calls": 2,
    },
    {"type": "tool_call", "id": "b", "command": "my-tool create --title One"},
    {"type": "tool_result", "id": "b", "exit_code": 0},
    {"type": "tool_call", "id": "c", "command": "my-tool create --title Two"},
    {"type": "tool_result", "id": "c", "exit_code": 0},
    {
        "type": "llm_call",
        "input_tokens": 1900,
        "output_tokens": 40,
        "latency_ms": 500,
        "tool_calls": 0,
    },
    {"type": "message", "role": "assistant", "text": "Created two notes."},
    "this line is not JSON",
]


@pytest.fixture
def workspace(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A workspace where the real my-tool was used as the agent said."""
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {**os.environ, "PATH": f"{EXAMPLES / 'bin'}:{os.environ['PATH']}"}
    for title in ("One", "Two"):
        subprocess.run(
            ["my-tool", "create", "--title", title],
            cwd=ws,
            env=env,
            check=True,
            capture_output=True,
        )
    return ws, env


def evaluate(
    tmp_path: Path,
    workspace: tuple[Path, dict[str, str]],
    base_url: str,
    exit_code: int | None = 0,
    composite: str = "",
    gates: str = GATES,
    agent_events: list = AGENT_EVENTS,
    **outcome: Any,
) -> tuple[RunResult, list[str]]:
    (tmp_path / "rubric.yaml").write_text(RUBRIC)
    (tmp_path / "matrix.yaml").write_text(matrix_text(base_url, gates, composite))
    matrix = load_matrix(tmp_path / "matrix.yaml")
    spec = RunSpec(
        experiment_id="e", run_id="e:T0:notes:0", tier="T0", scenario="notes", run_index=0
    )
    now = time.time()
    agent_outcome = AgentOutcome(
        exit_code=exit_code,
        stdout="working...\nCreated two notes.\n",
        started_at=now - 12.5,
        ended_at=now,
        **outcome,
    )
    lines = [e if isinstance(e, str) else json.dumps(e) for e in agent_events]
    ws, env = workspace
    phases: list[str] = []
    context = EvaluationContext(
        spec,
        matrix,
        GateSite(ws, env=env),
        environ={"TEST_JUDGE_KEY": "sk-test-secret-123456"},
        on_phase=phases.append,
    )
    result = evaluate_run(context, AgentOutput(agent_outcome, "\n".join(lines) + "\n")).result
    return result, phases


def test_a_run_with_all_three_layers(tmp_path: Path, workspace: Workspace) -> None:
    answer = {
        "scores": {"correctness": 0.8, "efficiency": 0.4},
        "weighted_score": 0.9,
        "confidence": 0.7,
        "issues": ["guessed `new`"],
        "highlights": ["recovered"],
    }
    with LLMStub(
        [reply(content=json.dumps(answer), prompt_tokens=3000, completion_tokens=200)]
    ) as stub:
        result, phases = evaluate(tmp_path, workspace, stub.base_url)
        sent = stub.requests[0]

    assert phases == ["gates", "judge"]
    assert result.status == RunStatus.completed
    # Layer 1, from the structured events: 3 target commands, 1 failed.
    i = result.interaction
    assert (i.total_commands, i.unique_commands, i.error_count) == (3, 3, 1)
    assert i.error_rate == pytest.approx(1 / 3) and i.completed
    assert set(i.per_subcommand) == {"new", "create"}
    # Layer 2: in order, no short-circuit.
    assert [g.gate_type for g in result.gates] == [
        "command_json_path",
        "file_exists",
        "command_succeeds",
        "no_transcript_errors",
    ]
    assert [g.passed for g in result.gates] == [True, True, False, False]
    assert (result.gates_passed, result.gates_total) == (2, 4)
    # Layer 3: recomputed weighted score 0.75*0.8 + 0.25*0.4 = 0.7; the judge said 0.9.
    judge = result.judge
    assert judge is not None and judge.error is None
    assert judge.weighted_score == pytest.approx(0.7)
    assert judge.reported_weighted_score == pytest.approx(0.9)
    assert judge.passed and judge.cost_usd == pytest.approx((3000 * 1.0 + 200 * 2.0) / 1e6)
    prompt = json.dumps(sent.body)
    assert "Create two notes." in prompt and "my-tool new --title x" in prompt
    assert "command_succeeds" in prompt and ".my-tool/store.json" in prompt
    assert sent.headers["authorization"] == "Bearer sk-test-secret-123456"
    assert "sk-test-secret" not in result.model_dump_json()

    # Outcome and ProjectScylla's metrics: gates failed, so the run fails.
    assert not result.passed and result.pass_rate == 0.0
    assert result.impl_rate == pytest.approx(0.7)
    assert result.composite_score == pytest.approx(0.35)
    assert "gates failed: command_succeeds, no_transcript_errors" in (result.fail_reason or "")
    assert result.input_tokens == 4200 and result.output_tokens == 150
    assert result.cost_usd == pytest.approx(4200 * 3 / 1e6 + 150 * 15 / 1e6)
    assert result.cost_of_pass == float("inf")
    assert result.judge_cost_usd == judge.cost_usd
    assert result.duration_seconds == pytest.approx(12.5)
    # Per-call metrics.
    assert [c.cumulative_input for c in result.llm_calls] == [1000, 2300, 4200]
    assert result.base_context == 1000 and result.context_growth_avg == pytest.approx(450)
    assert [c.tool_calls_made for c in result.llm_calls] == [1, 2, 0]
    # Token tracking and process metrics.
    assert result.tokens.schema_overhead == 300
    assert result.tokens.skill_efficiency == pytest.approx(100 / 400)
    assert result.process is not None
    assert result.process.r_prog == pytest.approx(2 / 3)
    assert result.process.r_prog_simple == pytest.approx(1 / 2)
    assert result.process.strategic_drift_binary == pytest.approx(1 / 3)
    assert result.transcript_malformed_lines == 1
    # What is stored round-trips, infinity included.
    assert type(result).model_validate_json(result.model_dump_json()) == result
    assert '"cost_of_pass":"Infinity"' in result.model_dump_json()


def test_a_judge_that_never_answers_a_run_whose_gates_failed_leaves_it_failed(
    tmp_path: Path,
    workspace: Workspace,
) -> None:
    """No judge could have passed it (a pass needs every gate): it is counted as failed,
    not an infrastructure error kept out of N; its score is missing, its error kept."""
    with LLMStub([reply(content="not json at all")]) as stub:
        result, _ = evaluate(tmp_path, workspace, stub.base_url)
    assert result.status == RunStatus.completed and not result.passed
    assert result.judge is not None and "malformed answer" in (result.judge.error or "")
    assert result.judge.weighted_score is None
    reasons = (result.fail_reason or "").split("; ")
    assert reasons[0] == "gates failed: command_succeeds, no_transcript_errors"
    assert reasons[1].startswith("judge error: malformed answer")
    # No judge score: the impl rate is the gates' share, as without a judge.
    assert result.impl_rate == 0.5 and result.composite_score == 0.25
    # The other layers are still reported.
    assert result.gates_total == 4 and result.interaction.total_commands == 3


def test_layered_composite_and_agent_failure(tmp_path: Path, workspace: Workspace) -> None:
    answer = {
        "scores": {"correctness": 1.0, "efficiency": 1.0},
        "weighted_score": 1.0,
        "confidence": 1.0,
        "issues": [],
        "highlights": [],
    }
    composite = "composite: {gate_weight: 0.5, judge_weight: 0.3, interaction_weight: 0.2}"
    with LLMStub([reply(content=json.dumps(answer))]) as stub:
        result, _ = evaluate(tmp_path, workspace, stub.base_url, exit_code=1, composite=composite)
    assert result.status == RunStatus.agent_error
    assert not result.interaction.completed
    assert "agent exited with code 1" in (result.fail_reason or "")
    first_try = result.interaction.first_try_success_rate
    assert result.layered_composite == pytest.approx(0.5 * 0.5 + 0.3 * 1.0 + 0.2 * first_try)


PASSING_GATES = """
        - {type: file_exists, path: ".my-tool/store.json"}"""
GOOD_ANSWER = {
    "scores": {"correctness": 1.0, "efficiency": 1.0},
    "weighted_score": 1.0,
    "confidence": 1.0,
    "issues": [],
    "highlights": [],
}


@pytest.mark.parametrize(
    ("outcome", "status", "reason"),
    [
        ({"exit_code": None, "timed_out": True}, RunStatus.timeout, "agent timed out after 12.5 s"),
        ({"exit_code": 1}, RunStatus.agent_error, "agent exited with code 1"),
        ({"exit_code": 0, "stopped": "workspace over 1 MB"}, RunStatus.agent_error, "stopped"),
    ],
)
def test_an_agent_that_did_not_finish_never_passes(
    tmp_path: Path,
    workspace: Workspace,
    outcome: dict[str, Any],
    status: RunStatus,
    reason: str,
) -> None:
    """Its gates pass and the judge likes its work: still not a pass."""
    with LLMStub([reply(content=json.dumps(GOOD_ANSWER))] * 2) as stub:
        result, _ = evaluate(tmp_path, workspace, stub.base_url, gates=PASSING_GATES, **outcome)
    assert result.gates_passed == result.gates_total == 1
    assert result.judge is not None and result.judge.passed
    assert result.status == status and not result.passed
    assert result.pass_rate == 0.0
    assert reason in (result.fail_reason or "")


def test_a_crashed_agents_reason_starts_with_its_last_words(
    tmp_path: Path, workspace: Workspace
) -> None:
    """Tables of reasons show a reason's first line: a Python agent's crash read
    "Traceback (most recent call last):" there. Its exception comes first now, and the
    tail it ends follows, for `scheduler show`."""
    stderr = (
        "Traceback (most recent call last):\n"
        '  File "/work/agent.py", line 3, in <module>\n'
        '    raise RuntimeError("agent blew up")\n'
        "RuntimeError: agent blew up\n"
    )
    with LLMStub([reply(content=json.dumps(GOOD_ANSWER))] * 2) as stub:
        result, _ = evaluate(tmp_path, workspace, stub.base_url, exit_code=1, stderr=stderr)
    first, rest = (result.fail_reason or "").split("\n", 1)
    assert first == "agent exited with code 1: RuntimeError: agent blew up"
    assert rest.startswith("Traceback (most recent call last):\n")
    assert 'raise RuntimeError("agent blew up")' in rest


def test_a_long_crash_is_kept_from_a_whole_line_not_from_the_middle_of_one(
    tmp_path: Path, workspace: Workspace
) -> None:
    """300 characters before the end fell in the middle of "Traceback (most recent call
    last):", and the reason's second line read "last):"."""
    frames = "".join(f'  File "/work/lib/module_{i}.py", line {i}, in step_{i}\n' for i in range(9))
    stderr = f"Traceback (most recent call last):\n{frames}ValueError: bad input\n"
    with LLMStub([reply(content=json.dumps(GOOD_ANSWER))] * 2) as stub:
        result, _ = evaluate(tmp_path, workspace, stub.base_url, exit_code=1, stderr=stderr)
    first, rest = (result.fail_reason or "").split("\n", 1)
    assert first == "agent exited with code 1: ValueError: bad input"
    tail = rest[: rest.index("ValueError: bad input") + len("ValueError: bad input")]
    assert tail.startswith('  File "/work/lib/module_') and stderr.strip().endswith(tail)
    assert 250 < len(tail) <= 300


def test_the_same_run_finished_by_itself_passes(tmp_path: Path, workspace: Workspace) -> None:
    with LLMStub([reply(content=json.dumps(GOOD_ANSWER))]) as stub:
        result, _ = evaluate(tmp_path, workspace, stub.base_url, gates=PASSING_GATES)
    assert result.status == RunStatus.completed and result.passed


@pytest.mark.parametrize("exit_code", [126, 127])
def test_an_agent_that_could_not_start_is_an_infrastructure_error(
    tmp_path: Path,
    workspace: Workspace,
    exit_code: int,
) -> None:
    """bash could not find or execute the agent: no gate runs, no judge is paid for."""
    stderr = "bash: line 1: ./agnet.sh: No such file or directory\n"
    with LLMStub([reply(content=json.dumps(GOOD_ANSWER))]) as stub:
        result, phases = evaluate(
            tmp_path,
            workspace,
            stub.base_url,
            exit_code=exit_code,
            gates=PASSING_GATES,
            agent_events=[],
            stderr=stderr,
        )
        assert stub.requests == []
    assert result.status == RunStatus.infra_error and not result.passed
    assert result.fail_reason == (
        f"agent could not start (exit {exit_code}): bash: line 1: ./agnet.sh: "
        "No such file or directory"
    )
    assert result.gates == [] and result.judge is None and phases == []


def test_exit_127_after_real_work_is_the_agents_own_failure(
    tmp_path: Path,
    workspace: Workspace,
) -> None:
    """An agent that ran commands and then ended on a missing one did run."""
    with LLMStub([reply(content=json.dumps(GOOD_ANSWER))]) as stub:
        result, _ = evaluate(tmp_path, workspace, stub.base_url, exit_code=127, gates=PASSING_GATES)
    assert result.status == RunStatus.agent_error and not result.passed
    assert result.gates_total == 1


PASSING_GATE = """
        - {type: file_exists, path: ".my-tool/store.json"}"""


def _overflow(*args: object, **kwargs: object) -> Any:
    # What pricing a token count of 400 digits raised, before the parsers refused it.
    raise OverflowError("int too large to convert to float")


def test_output_that_cannot_be_read_fails_the_run_and_counts_in_the_statistics(
    tmp_path: Path, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second line of defence behind the parsers' ceilings: whatever in the agent's
    output makes reading it raise is the agent's failure, never an infrastructure error,
    which the statistics would leave out (a failing run hidden from its tier's rate)."""
    monkeypatch.setattr("core.evaluation.evaluate.parse_transcript", _overflow)
    result, phases = evaluate(tmp_path, workspace, "http://127.0.0.1:9", gates=PASSING_GATE)
    assert result.status == RunStatus.agent_error and result.status.counted
    assert not result.passed and result.pass_rate == 0.0
    assert result.fail_reason is not None
    assert result.fail_reason.startswith(f"{UNSCORED}OverflowError(")
    assert (result.gates_passed, result.gates_total) == (1, 1)  # its gates ran, as evidence
    assert phases == ["gates"] and result.judge is None  # failed whatever a judge says
    assert result.cost_usd is None and result.cost_unknown_reason == result.fail_reason


def test_figures_that_cannot_be_scored_fail_the_run_and_count_in_the_statistics(
    tmp_path: Path, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("core.evaluation.evaluate.token_metrics", _overflow)
    answer = {"scores": {"correctness": 1, "efficiency": 1}, "weighted_score": 1,
              "confidence": 1, "issues": [], "highlights": []}  # fmt: skip
    with LLMStub([reply(content=json.dumps(answer))]) as stub:
        result, _ = evaluate(tmp_path, workspace, stub.base_url, gates=PASSING_GATE)
    assert result.status == RunStatus.agent_error and result.status.counted
    assert not result.passed and result.composite_score == 0.0
    assert result.fail_reason == f"{UNSCORED}OverflowError('int too large to convert to float')"
    assert (result.gates_passed, result.gates_total) == (1, 1)
    assert result.judge is not None and result.judge.passed
