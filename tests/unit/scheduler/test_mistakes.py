"""scheduler.mistakes through scheduler.validation, from Python: which agent commands
and judges are refused before anything is queued, which only warned of, which pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import ConfigError
from core.matrix import ConfigProblem
from scheduler.validation import prepare, validate

MATRIX = """\
name: m
runs_per_tier: 1
agent: {{kind: command, command: {command}, timeout_s: 30{env}}}
tiers: [{{id: T0}}]
scenarios: [{{id: s, prompt: go}}]
"""


def matrix(tmp_path: Path, command: str, env: str = "") -> Path:
    for name in ("agent.sh", "out.txt", "input.txt", "conf.yaml"):
        (tmp_path / name).write_text("beside the matrix\n")
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX.format(command=repr(command), env=env))
    return path


def refused_words(tmp_path: Path, command: str, env: str = "") -> list[str]:
    """The words of `command` refused as files next to the matrix named relatively."""
    try:
        validate(matrix(tmp_path, command, env))
    except ConfigError as exc:
        return [problem(p).message.split("'")[1] for p in exc.problems]
    return []


def problem(found: object) -> ConfigProblem:
    assert isinstance(found, ConfigProblem)
    return found


@pytest.mark.parametrize(
    ("command", "refused"),
    [
        ("./agent.sh", ["./agent.sh"]),
        ("bash agent.sh --fast", ["agent.sh"]),
        ("agent.sh", ["agent.sh"]),  # bash looks a bare name up on PATH, not here
        ("my-agent < input.txt", ["input.txt"]),  # read in the workspace
        ("my-agent --config=conf.yaml", ["conf.yaml"]),
        ("cd /tmp && bash agent.sh", ["agent.sh"]),
        # A redirection's target is written in the workspace: no file to miss.
        ("echo done > out.txt 2>&1", []),
        ("my-agent >> out.txt", []),
        ('"$EVALFLEET_MATRIX_DIR/agent.sh"', []),
        ("bash $EVALFLEET_MATRIX_DIR/agent.sh", []),
        ("/usr/bin/env bash -c true", []),
        ("FLAG=./agent.sh my-agent", []),  # an assignment, not a file read
        ("echo 'unbalanced", []),  # bash will say so itself
    ],
)
def test_relative_names_of_files_beside_the_matrix(
    tmp_path: Path, command: str, refused: list[str]
) -> None:
    assert refused_words(tmp_path, command) == refused


def test_a_bare_program_on_a_path_holding_the_matrix_folder_is_found(tmp_path: Path) -> None:
    env = ', env: {PATH: "${EVALFLEET_MATRIX_DIR}:${PATH}"}'
    assert refused_words(tmp_path, "agent.sh", env) == []
    assert refused_words(tmp_path, "bash agent.sh", env) == ["agent.sh"]


def test_the_builtin_agent_has_no_command_to_check(tmp_path: Path) -> None:
    path = matrix(tmp_path, "x")
    text = path.read_text().replace(
        "{kind: command, command: 'x', timeout_s: 30}",
        '{kind: openai, base_url: "http://127.0.0.1:9/v1", model: m, api_key_env: null}',
    )
    path.write_text(text)
    assert validate(path).warnings == ()


def test_a_relative_program_nothing_provides_is_only_a_warning(tmp_path: Path) -> None:
    checked = prepare(matrix(tmp_path, "./run.sh && echo ok"))
    [warning] = checked.warnings
    assert warning.field == "agent.command" and warning.line == 3
    assert "'./run.sh' is run by a relative path" in warning.message
    assert '"$EVALFLEET_MATRIX_DIR/run.sh"' in warning.message


JUDGED = """\
name: j
runs_per_tier: 1
agent: {{command: "echo hi", timeout_s: 30}}
tiers: [{{id: T0}}]
scenarios:
  - id: s
    prompt: go
    evaluation: {{judge: {{enabled: {enabled}, rubric: rubric.yaml}}}}
judge: {{model: judge-model, api_key_env: {key}}}
"""


@pytest.mark.parametrize(
    ("enabled", "key", "set_", "allowed", "refused"),
    [
        ("true", "MISTAKES_TEST_KEY", False, False, True),
        ("true", "MISTAKES_TEST_KEY", False, True, False),
        ("true", "MISTAKES_TEST_KEY", True, False, False),
        ("true", "null", False, False, False),  # an endpoint without a key
        ("auto", "MISTAKES_TEST_KEY", False, False, False),  # off without the key
        ("false", "MISTAKES_TEST_KEY", False, False, False),
    ],
)
def test_a_judge_without_its_key(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    enabled: str,
    key: str,
    set_: bool,
    allowed: bool,
    refused: bool,
) -> None:
    monkeypatch.delenv("MISTAKES_TEST_KEY", raising=False)
    if set_:
        monkeypatch.setenv("MISTAKES_TEST_KEY", "sk-test")
    (tmp_path / "rubric.yaml").write_text("criteria: [{id: q, weight: 1, description: q}]\n")
    path = tmp_path / "matrix.yaml"
    path.write_text(JUDGED.format(enabled=enabled, key=key))
    if not refused:
        prepare(path, allow_missing_judge_key=allowed)
        return
    with pytest.raises(ConfigError) as raised:
        prepare(path, allow_missing_judge_key=allowed)
    [found] = map(problem, raised.value.problems)
    assert (found.field, found.line, found.column) == ("judge.api_key_env", 9, 42)
    assert found.message.startswith("MISTAKES_TEST_KEY is not set, and scenario s is judged")
