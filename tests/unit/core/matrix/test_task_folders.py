"""Benchmark task folders as scenarios (core.matrix.task_folders): both formats read
into the scenario's keys, `task:`/`tasks:` entries expanded while the matrix is read
(globs, overrides, ids), and every malformed task refused at its file and line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from core.errors import ConfigError
from core.matrix import Matrix, load_matrix
from core.matrix.task_folders import task_id
from tests.conftest import FIXTURES, run_cli

TASKS = FIXTURES / "tasks"
HARBOR = sorted(p.name for p in TASKS.iterdir() if (p / "task.toml").is_file())
TB = sorted(p.name for p in TASKS.iterdir() if (p / "task.yaml").is_file())
HEAD = """\
name: tasks
runs_per_tier: 2
agent: {kind: command, command: "true", timeout_s: 60}
tiers: [{id: T0}]
scenarios:
"""


def matrix_of(folder: Path, *entries: str) -> Path:
    path = folder / "matrix.yaml"
    path.write_text(HEAD + "".join(f"  - {entry}\n" for entry in entries), encoding="utf-8")
    return path


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    """The fixture tasks copied into a matrix folder (tmp_path/tasks)."""
    shutil.copytree(TASKS, tmp_path / "tasks")
    return tmp_path / "tasks"


def refused(matrix: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_matrix(matrix)
    return str(caught.value)


def line_of(path: Path, text: str) -> int:
    lines = path.read_text(encoding="utf-8").splitlines()
    return next(n for n, line in enumerate(lines, 1) if text in line)


# --- both formats -----------------------------------------------------------------------------


def test_a_harbor_task_fills_the_scenario(tasks: Path) -> None:
    [s] = load_matrix(matrix_of(tasks.parent, "{task: tasks/hello-file}")).scenarios
    folder = tasks / "hello-file"
    assert (s.id, s.task, s.prompt_file, s.prompt) == (
        "hello-file",
        folder,
        folder / "instruction.md",
        None,
    )
    assert (s.tests, s.solution, s.agent_timeout_s) == (folder / "tests", folder / "solution", 120)
    assert s.environment is not None and s.verifier is not None
    assert (s.environment.image, s.environment.build, s.environment.workdir) == (None, None, "/app")
    assert (s.environment.cpus, s.environment.memory_mb) == (1, 512)  # memory = "512M"
    assert (s.verifier.command, s.verifier.reward, s.verifier.timeout_s) == (
        "bash /tests/test.sh",
        "file",
        30,
    )
    assert s.evaluation.gates == [] and s.pass_reward == 1.0  # the verifier's verdict


def test_harbor_environments_image_build_workspace_env(tasks: Path) -> None:
    (tasks / "hello-file" / "task.toml").write_text(
        '[environment]\ndocker_image = "ghcr.io/x/y:1"\n[agent]\nuser = "agent"\n'
        '[verifier]\nuser = "root"\nenv = {A = "1"}\n'
    )
    matrix = load_matrix(matrix_of(tasks.parent, '{tasks: "tasks/*"}'))
    by_id = {s.id: s for s in matrix.scenarios}
    hello = by_id["hello-file"]
    assert hello.environment is not None and hello.verifier is not None
    assert (hello.environment.image, hello.environment.agent_user) == ("ghcr.io/x/y:1", "agent")
    assert (hello.environment.verifier_user, hello.verifier.env) == ("root", {"A": "1"})
    own = by_id["own-image"].environment
    assert own is not None and own.build == tasks / "own-image" / "environment"
    ledger = by_id["multi-file-env"].environment
    assert ledger is not None and (ledger.workdir, ledger.memory_mb) == ("/srv/ledger", 1024)
    # environment/ without a Dockerfile: its files are the workspace, run on this system
    words = by_id["word-count"]
    assert words.workspace == tasks / "word-count" / "environment"
    assert words.environment is not None and words.environment.build is None
    assert by_id["verifier-env"].verifier.env == {"EXPECTED_LINES": "3"}  # type: ignore[union-attr]


def test_a_terminal_bench_task_fills_the_scenario(tasks: Path) -> None:
    [s] = load_matrix(matrix_of(tasks.parent, "{task: tasks/tb-fibonacci}")).scenarios
    folder = tasks / "tb-fibonacci"
    assert s.prompt is not None and s.prompt.startswith("Write the first ten Fibonacci")
    assert (s.prompt_file, s.tests, s.solution) == (
        None,
        folder / "tests",
        folder / "solution.sh",
    )
    assert s.verifier is not None and s.environment is not None
    # run-tests.sh is at the task's root: shipped beside the tests, at /tests
    assert (s.verifier.command, s.verifier.runner) == (
        "bash /tests/run-tests.sh",
        folder / "run-tests.sh",
    )
    assert (s.verifier.reward, s.verifier.timeout_s, s.verifier.env) == (
        "exit_code",
        30,
        {"TEST_DIR": "/tests"},
    )
    assert (s.agent_timeout_s, s.environment.build) == (240, None)
    [image] = load_matrix(matrix_of(tasks.parent, "{task: tasks/tb-own-image}")).scenarios
    assert image.environment is not None and image.environment.build == tasks / "tb-own-image"


def test_terminal_bench_without_run_tests_runs_pytest(tasks: Path) -> None:
    (tasks / "tb-fibonacci" / "run-tests.sh").unlink()
    [s] = load_matrix(matrix_of(tasks.parent, "{task: tasks/tb-fibonacci}")).scenarios
    assert s.verifier is not None and s.verifier.runner is None
    assert s.verifier.command == "cd /app && python3 -m pytest -q /tests/test_outputs.py"


# --- entries: globs, overrides, ids ----------------------------------------------------------


def test_a_glob_expands_to_every_task_sorted_with_overrides(tasks: Path) -> None:
    matrix = load_matrix(
        matrix_of(
            tasks.parent,
            '{tasks: "tasks/*", runs: 3, environment: {cpus: 4}, verifier: {timeout_s: 9}}',
            "{id: mine, prompt: hi}",
        )
    )
    ids = [s.id for s in matrix.scenarios]
    assert ids == [*sorted(HARBOR + TB), "mine"]  # README.md, a file, is no task: skipped
    assert len(HARBOR) >= 8 and len(TB) >= 3
    tasks_ = matrix.scenarios[:-1]
    assert all(s.runs == 3 and s.verifier and s.verifier.timeout_s == 9 for s in tasks_)
    # mappings merged key by key: the task's other environment keys stay
    hello = matrix.scenario("hello-file")
    assert hello.environment is not None and (
        hello.environment.cpus,
        hello.environment.memory_mb,
    ) == (
        4,
        512,
    )
    assert hello.verifier is not None and hello.verifier.command == "bash /tests/test.sh"


def test_an_entry_prompt_or_image_replaces_the_tasks(tasks: Path) -> None:
    [s] = load_matrix(
        matrix_of(
            tasks.parent,
            "{task: tasks/own-image, id: seeded, prompt: other, environment: {image: 'x:1'}}",
        )
    ).scenarios
    assert (s.id, s.prompt, s.prompt_file) == ("seeded", "other", None)
    assert s.environment is not None and (s.environment.image, s.environment.build) == ("x:1", None)


def test_a_stored_matrix_holds_plain_scenarios(tasks: Path) -> None:
    matrix = load_matrix(matrix_of(tasks.parent, '{tasks: "tasks/tb-*"}'))
    stored = Matrix.model_validate(
        json.loads(matrix.model_dump_json()), context={"check_files": False}
    )
    assert stored.scenarios == matrix.scenarios


def test_folder_names_become_identifiers() -> None:
    assert task_id("fix bug #12") == "fix-bug-12"
    assert task_id("_private.task") == "private.task"
    assert task_id("x" * 80) == "x" * 64
    assert task_id("###") == "task"


def test_a_folder_named_twice_is_refused_naming_both(tmp_path: Path) -> None:
    for group in ("a", "b"):
        shutil.copytree(TASKS / "hello-file", tmp_path / group / "hello-file")
    matrix = matrix_of(tmp_path, '{tasks: "*/hello-file"}')
    message = refused(matrix)
    assert f"matrix.yaml:{line_of(matrix, 'tasks:')}:" in message
    assert "two scenarios would have the id 'hello-file'" in message
    assert str(tmp_path / "a" / "hello-file") in message
    assert str(tmp_path / "b" / "hello-file") in message
    # a written scenario of the same id collides too
    shutil.rmtree(tmp_path / "b")
    assert "'hello-file'" in refused(
        matrix_of(tmp_path, "{id: hello-file, prompt: x}", "{task: a/hello-file}")
    )


def test_a_glob_matching_a_folder_that_is_no_task_is_refused(tasks: Path) -> None:
    (tasks / "notes").mkdir()
    matrix = matrix_of(tasks.parent, '{tasks: "tasks/*"}')
    message = refused(matrix)
    assert f"matrix.yaml:{line_of(matrix, 'tasks:')}:" in message
    assert f"{tasks / 'notes'}, not a task folder" in message and "narrow the glob" in message
    # a narrower glob is the fix
    assert len(load_matrix(matrix_of(tasks.parent, '{tasks: "tasks/*-*"}')).scenarios) >= 8


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ('{tasks: "nowhere/*"}', "matches no folder"),
        ("{task: nowhere}", "folder not found"),
        ("{task: tasks}", "is not a task folder"),
        ("{task: tasks/hello-file, tasks: 'tasks/*'}", "not both"),
        ("{tasks: [a, b]}", "expected a glob as a string"),
    ],
)
def test_entries_naming_no_task_are_refused_at_their_line(
    tasks: Path, entry: str, says: str
) -> None:
    message = refused(matrix_of(tasks.parent, entry))
    assert "matrix.yaml:6:" in message and says in message


def test_a_task_outside_the_matrix_folder_is_refused_unless_allowed(tmp_path: Path) -> None:
    shutil.copytree(TASKS / "hello-file", tmp_path / "hello-file")
    (tmp_path / "m").mkdir()
    matrix = matrix_of(tmp_path / "m", "{task: ../hello-file}")
    assert "is outside the matrix folder" in refused(matrix)
    matrix.write_text("allow_outside_files: true\n" + matrix.read_text())
    assert load_matrix(matrix).scenarios[0].id == "hello-file"


def test_an_override_error_is_at_its_key_and_a_task_value_error_names_the_task(
    tasks: Path,
) -> None:
    matrix = matrix_of(tasks.parent, '{tasks: "tasks/tb-*",\n      runs: 0}')
    message = refused(matrix)
    assert f"matrix.yaml:{line_of(matrix, 'runs: 0')}:13: scenarios.0.runs:" in message
    assert message.count("\n") == 0  # one problem, not one per task
    # an entry key that clashes with what the task gives: named with the task
    message = refused(matrix_of(tasks.parent, "{task: tasks/hello-file, prompt_file: nope.md}"))
    assert "scenarios.0.prompt_file" in message and "file not found" in message


# --- malformed tasks: their file and line ----------------------------------------------------


def broken(tasks: Path, name: str, file: str, text: str) -> str:
    (tasks / name / file).write_text(text, encoding="utf-8")
    return refused(matrix_of(tasks.parent, '{tasks: "tasks/*"}'))


@pytest.mark.parametrize(
    ("text", "place", "says"),
    [
        ("[agent]\ntimeout_sec = 10\n[verifier\n", ":3:", "TOML syntax error"),
        ("[agent]\ntimeout_sec = -5\n", ":2:1: agent.timeout_sec:", "seconds > 0, got -5"),
        ('[environment]\ncpus = 2\nmemory = "lots"\n', ":3:1: environment.memory:", "such as"),
        ("[environment]\n\ncpus = 0\n", ":3:1: environment.cpus:", "greater than 0"),
        ("[verifier]\nenv = {A = 1}\n", ":2:1: verifier.env:", "valid string"),
        ('[environment]\nworkdir = "app"\n', ":2:1: environment.workdir:", "absolute"),
        ("agent = 3\n", ":1:1: agent:", "must be a table"),
    ],
)
def test_a_bad_task_toml_is_refused_at_its_line(
    tasks: Path, text: str, place: str, says: str
) -> None:
    message = broken(tasks, "hello-file", "task.toml", text)
    assert f"{tasks / 'hello-file' / 'task.toml'}{place}" in message, message
    assert says in message


@pytest.mark.parametrize(
    ("missing", "says"),
    [
        ("instruction.md", "has no instruction.md (the prompt)"),
        ("tests/test.sh", "has no tests/test.sh (the verifier)"),
        ("solution/solve.sh", "has no solution/solve.sh (solution/ holds no solve.sh)"),
    ],
)
def test_a_harbor_task_missing_a_file_is_refused_naming_it(
    tasks: Path, missing: str, says: str
) -> None:
    (tasks / "word-count" / missing).unlink()
    message = refused(matrix_of(tasks.parent, '{tasks: "tasks/*"}'))
    assert f"{tasks / 'word-count'}/: this task folder {says}" in message


@pytest.mark.parametrize(
    ("text", "place", "says"),
    [
        ("instruction: [unclosed\nparser_name: pytest\n", ":2:12:", "YAML syntax error"),
        ("parser_name: pytest\nmax_test_timeout_sec: 30\n", ":1:1: instruction:", "instruction"),
        ("instruction: go\nparser_name: swebench\n", ":2:1: parser_name:", "not supported"),
        ("instruction: go\nmax_agent_timeout_sec: 0\n", ":2:1: max_agent_timeout_sec:", "> 0"),
        (
            "instruction: go\n\nmax_test_timeout_sec: soon\n",
            ":3:1: max_test_timeout_sec:",
            "number",
        ),
        ("- instruction: go\n", ":1:1:", "expected a mapping"),
    ],
)
def test_a_bad_task_yaml_is_refused_at_its_line(
    tasks: Path, text: str, place: str, says: str
) -> None:
    message = broken(tasks, "tb-json-config", "task.yaml", text)
    assert f"{tasks / 'tb-json-config' / 'task.yaml'}{place}" in message, message
    assert says in message


def test_every_problem_of_a_task_file_is_said_in_one_run_of_validate(tasks: Path) -> None:
    """One error a run took three runs of `validate` to see three problems of one
    task.toml; a task.yaml's likewise."""
    (tasks / "hello-file" / "task.toml").write_text(
        '[agent]\ntimeout_sec = "fast"\n[environment]\ncpus = -1\nmemory = "lots"\n'
    )
    (tasks / "tb-json-config" / "task.yaml").write_text(
        "instruction: go\nparser_name: swebench\nmax_agent_timeout_sec: abc\n"
    )
    result = run_cli("validate", str(matrix_of(tasks.parent, '{tasks: "tasks/*"}')), env=None)
    assert result.returncode == 2
    toml, yaml = tasks / "hello-file" / "task.toml", tasks / "tb-json-config" / "task.yaml"
    said = result.stderr
    places = [
        said.index(problem)
        for problem in (
            f"{toml}:2:1: agent.timeout_sec: expected a number of seconds > 0, got 'fast'",
            f"{toml}:4:1: environment.cpus: Input should be greater than 0",
            f"{toml}:5:1: environment.memory: expected a size such as",
            f"{yaml}:2:1: parser_name: parser 'swebench' is not supported",
            f"{yaml}:3:1: max_agent_timeout_sec: expected a number of seconds > 0, got 'abc'",
        )
    ]
    # Each file's in its order.
    assert places[:3] == sorted(places[:3]) and places[3:] == sorted(places[3:]), said
    assert said.splitlines()[-1] == (
        "5 problem(s); nothing was started. Once it reads, its commands, files and API keys "
        "are checked too."
    )


def test_a_terminal_bench_task_missing_its_tests_is_refused(tasks: Path) -> None:
    shutil.rmtree(tasks / "tb-json-config" / "tests")
    (tasks / "tb-fibonacci" / "run-tests.sh").unlink()
    (tasks / "tb-fibonacci" / "tests" / "test_outputs.py").unlink()
    (tasks / "tb-own-image" / "Dockerfile").unlink()
    message = refused(matrix_of(tasks.parent, '{tasks: "tasks/tb-*"}'))
    # every broken task at once
    assert f"{tasks / 'tb-json-config'}/: this task folder has no tests/" in message
    assert f"{tasks / 'tb-fibonacci'}/: this task folder has no run-tests.sh nor" in message
    assert f"{tasks / 'tb-own-image'}/: this task folder has a docker-compose file" in message
