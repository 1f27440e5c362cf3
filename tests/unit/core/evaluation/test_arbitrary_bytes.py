"""Whatever bytes a run leaves (file names, file contents, symlink targets, its
output, its events file, its gates' output), the evaluation records the outcome
its agent and its gates give, with or without a judge, and evidence that can be
stored; what cannot be built is missing evidence, never the outcome: evaluate_run
driven in process, as test_evaluate drives it."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.evaluation.evaluate import AgentOutput, EvaluationContext, GateSite, evaluate_run
from core.evidence.caps import bounded
from core.files.changes import snapshot
from core.matrix import load_matrix
from core.results.run import RunSpec, RunStatus
from core.results.transcript import AgentOutcome
from tests.support.llm_stub import LLMStub, reply

JUDGMENT = {
    "scores": {"quality": 1.0},
    "weighted_score": 1.0,
    "confidence": 0.9,
    "issues": [],
    "highlights": [],
}

# A file name as the kernel takes it: any bytes but the separator and NUL.
names = st.binary(min_size=1, max_size=24).filter(
    lambda name: b"/" not in name and b"\0" not in name and name not in (b".", b"..")
)
# A text from a run as Python may hold it: decoded leniently, holding undecodable
# bytes as surrogates (as a file name does), or any code point a JSON escape gives.
texts = st.one_of(
    st.binary(max_size=200).map(lambda data: data.decode("utf-8", "replace")),
    st.binary(max_size=200).map(lambda data: data.decode("utf-8", "surrogateescape")),
    st.text(st.characters(exclude_categories=()), max_size=200),
)


@pytest.fixture(scope="module")
def judge_url() -> Iterator[str]:
    with LLMStub([reply(content=json.dumps(JUDGMENT))]) as stub:
        yield stub.base_url


def matrix_text(judge_url: str | None, gate_exit: int) -> str:
    # The command gate prints the bytes of gate-output.bin, then passes or fails by
    # its exit code alone; the file gate passes exactly when the agent left out.txt.
    gates = (
        f'[{{type: command_succeeds, command: "cat gate-output.bin; exit {gate_exit}"}}, '
        "{type: file_exists, path: out.txt}]"
    )
    judged = ", judge: {rubric: rubric.yaml, pass_threshold: 0.5}" if judge_url else ""
    judge = f'judge: {{base_url: "{judge_url}", model: j, api_key_env: null}}' if judge_url else ""
    return f"""
name: hostile
agent: {{command: "true", transcript: events-jsonl}}
tiers: [{{id: T0}}]
scenarios:
  - id: s
    prompt: go
    evaluation: {{gates: {gates}{judged}}}
{judge}
"""


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    files=st.dictionaries(names, st.binary(max_size=300), max_size=6),
    links=st.dictionaries(names, names, max_size=3),
    stdout=texts,
    stderr=texts,
    said=st.lists(texts, max_size=4),
    junk=texts,
    gate_output=st.binary(max_size=300),
    gate_passes=st.booleans(),
    leaves_out_txt=st.booleans(),
    judged=st.booleans(),
)
def test_any_bytes_a_run_leaves_give_the_outcome_its_gates_give(
    judge_url: str,
    files: dict[bytes, bytes],
    links: dict[bytes, bytes],
    stdout: str,
    stderr: str,
    said: list[str],
    junk: str,
    gate_output: bytes,
    gate_passes: bool,
    leaves_out_txt: bool,
    judged: bool,
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "rubric.yaml").write_text("criteria: [{id: quality, weight: 1, description: q}]\n")
        (root / "matrix.yaml").write_text(
            matrix_text(judge_url if judged else None, 0 if gate_passes else 1)
        )
        matrix = load_matrix(root / "matrix.yaml")
        workspace = root / "ws"
        workspace.mkdir()
        (workspace / "kept.txt").write_text("prepared\n")
        prepared = snapshot(workspace)

        # The agent's work: hostile names, contents and link targets.
        base = os.fsencode(workspace)
        (workspace / "kept.txt").write_bytes(gate_output)
        for name, content in files.items():
            with open(os.path.join(base, b"f-" + name), "wb") as file:
                file.write(content)
        for name, target in links.items():
            os.symlink(target, os.path.join(base, b"l-" + name))
        (workspace / "gate-output.bin").write_bytes(gate_output)
        if leaves_out_txt:
            (workspace / "out.txt").touch()
        events = [
            json.dumps({"type": "llm_call", "input_tokens": 10, "output_tokens": 5}),
            *(json.dumps({"type": "message", "role": "assistant", "text": t}) for t in said),
            *(
                json.dumps({"type": "tool_call", "id": str(i), "command": t})
                for i, t in enumerate(said)
            ),
            "junk " + junk,
        ]
        now = time.time()
        outcome = AgentOutcome(
            exit_code=0, stdout=stdout, stderr=stderr, started_at=now - 1, ended_at=now
        )
        spec = RunSpec(experiment_id="e", run_id="e:T0:s:0", tier="T0", scenario="s", run_index=0)

        context = EvaluationContext(
            spec, matrix, GateSite(workspace, prepared=prepared), environ={}
        )
        evaluated = evaluate_run(context, AgentOutput(outcome, "\n".join(events) + "\n"))

    result = evaluated.result
    passes = gate_passes and leaves_out_txt
    assert (result.status, result.passed) == (RunStatus.completed, passes), result.fail_reason
    assert [g.passed for g in result.gates] == [gate_passes, leaves_out_txt]
    assert (result.judge is not None and result.judge.error is None) == judged
    # Nothing went missing, and all of it can be stored as the worker stores it.
    assert evaluated.evidence.cuts == []
    result.model_dump_json()
    bounded(evaluated.evidence, matrix.evidence, []).model_dump_json()


def test_changes_that_cannot_be_built_are_missing_evidence_and_the_outcome_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreadable(root: Path) -> None:
        raise OSError(f"cannot read {root}")

    (tmp_path / "matrix.yaml").write_text(matrix_text(None, 0))
    matrix = load_matrix(tmp_path / "matrix.yaml")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "out.txt").touch()
    monkeypatch.setattr("core.evaluation.evaluate.snapshot", unreadable)
    now = time.time()
    spec = RunSpec(experiment_id="e", run_id="e:T0:s:0", tier="T0", scenario="s", run_index=0)
    (workspace / "gate-output.bin").write_bytes(b"")

    outcome = AgentOutcome(exit_code=0, started_at=now - 1, ended_at=now)
    evaluated = evaluate_run(
        EvaluationContext(spec, matrix, GateSite(workspace)), AgentOutput(outcome)
    )

    assert (evaluated.result.status, evaluated.result.passed) == (RunStatus.completed, True)
    assert evaluated.evidence.cuts == [
        f"changes summary, patch: not built, the workspace could not be read: "
        f"OSError('cannot read {workspace}')"
    ]
