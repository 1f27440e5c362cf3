"""scheduler.mistakes through scheduler.validation, from Python: which agent commands
and judges are refused before anything is queued, which only warned of, which pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import ConfigError
from core.matrix import ConfigProblem
from scheduler.validation import prepare, validate
from tests.conftest import run_cli

MATRIX = """\
name: m
runs_per_tier: 1
agent: {{kind: command, command: {command}, timeout_s: 30{env}}}
tiers: [{{id: T0}}]
scenarios: [{{id: s, prompt: go}}]
"""


@pytest.fixture(autouse=True)
def _closed_to_others(tmp_path: Path, _passable_tmp_path: None) -> None:
    # The matrix folder as the warning on a folder others may read asks it to be: only
    # the mistakes each test makes are said (test_a_folder_others_may_read_is_warned_of).
    tmp_path.chmod(0o700)


def matrix(tmp_path: Path, command: str, env: str = "") -> Path:
    for name in ("agent.sh", "out.txt", "input.txt", "conf.yaml"):
        (tmp_path / name).write_text("beside the matrix\n")
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX.format(command=json.dumps(command), env=env))
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
        ("bash agent.sh --fast", ["agent.sh"]),  # the script an interpreter runs
        ("agent.sh", ["agent.sh"]),  # bash looks a bare name up on PATH, not here
        ("cd /tmp && bash agent.sh", ["agent.sh"]),
        ("python3 -u agent.sh", ["agent.sh"]),
        ("timeout 600 ./agent.sh", ["./agent.sh"]),
        ("env -i A=1 nice -n 5 ./agent.sh", ["./agent.sh"]),
        ("x=$(./agent.sh) my-agent", ["./agent.sh"]),
        ("if true; then ./agent.sh; fi", ["./agent.sh"]),
        ("(cd . && agent.sh) | tee log", ["agent.sh"]),
        ("# setup\n./agent.sh # runs it", ["./agent.sh"]),
        # Arguments are the agent's own business in its workspace, never the program
        # run: a file of that name beside the matrix says nothing about them.
        ("touch out.txt", []),
        ("cat input.txt && my-agent out.txt", []),
        ("my-agent < input.txt", []),
        ("my-agent --config=conf.yaml", []),
        ("cp conf.yaml out.txt", []),
        ("echo done > out.txt 2>&1", []),
        ("my-agent >> out.txt", []),
        ('python3 -c \'open("out.txt", "w")\'', []),  # inline: no script
        ("bash -lc 'touch out.txt'", []),
        ('"$EVALFLEET_MATRIX_DIR/agent.sh"', []),
        ("bash $EVALFLEET_MATRIX_DIR/agent.sh", []),
        ("/usr/bin/env bash -c true", []),
        ("FLAG=./agent.sh my-agent", []),  # an assignment, not a file read
        ("for f in agent.sh out.txt; do echo $f; done", []),  # a for's words
        ("cat <<EOF\nagent.sh\n./agent.sh\nEOF", []),  # a here-document's body
        ("# ./agent.sh\necho hi", []),  # a comment
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


CASE = (
    'case "$EVALFLEET_TIER/$EVALFLEET_SCENARIO" in T1/s1|T1/s2) k=20;; T1/s4) k=6;; '
    '*) k=10;; esac; if [ "$EVALFLEET_RUN_INDEX" -lt "$k" ]; then touch out.txt; fi'
)


@pytest.mark.parametrize(
    ("command", "runs"),
    [
        (CASE, []),  # patterns are no commands; `touch out.txt` runs touch
        ("case $T in\n  (T1/s2) ./run.sh ;;\n  *) ./other.sh\nesac", ["./run.sh", "./other.sh"]),
    ],
)
def test_a_cases_patterns_are_not_commands_its_clauses_are(
    tmp_path: Path, command: str, runs: list[str]
) -> None:
    """No warning for the patterns `T1/s1|T1/s2)`, on every validate and submit; a
    clause's relative program is warned of as any other."""
    warned = [w.message.split("'")[1] for w in prepare(matrix(tmp_path, command)).warnings]
    assert warned == runs


def test_the_builtin_agent_has_no_command_to_check(tmp_path: Path) -> None:
    path = matrix(tmp_path, "x")
    text = path.read_text().replace(
        '{kind: command, command: "x", timeout_s: 30}',
        '{kind: openai, base_url: "http://127.0.0.1:9/v1", model: m, api_key_env: null}',
    )
    path.write_text(text + "pricing: {m: {input: 1, output: 1}}\n")  # else: unknown costs
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
        prepare(path, allow_missing_keys=allowed)
        return
    with pytest.raises(ConfigError) as raised:
        prepare(path, allow_missing_keys=allowed)
    [found] = map(problem, raised.value.problems)
    assert (found.field, found.line, found.column) == ("judge.api_key_env", 9, 42)
    assert found.message.startswith("MISTAKES_TEST_KEY is not set, and scenario s is judged")


def _off_path(tmp_path: Path, command: str, env: str = "") -> list[str]:
    """The programs `command` runs that validate warns are not here."""
    warnings = prepare(matrix(tmp_path, command, env)).warnings
    return [w.message.split("'")[1] for w in warnings if "run by the agent's command" in w.message]


@pytest.mark.parametrize(
    ("command", "warned"),
    [
        ("claud -p go > out.txt", ["claud"]),  # a typo of the agent's CLI
        ("/opt/evalfleet-nowhere/agent --go", ["/opt/evalfleet-nowhere/agent"]),
        ("timeout 60 evalfleet-no-such-agent", ["evalfleet-no-such-agent"]),
        ("python3 -c 'print(1)' | cat > out.txt", []),  # on PATH
        ("f() { echo hi; }; f && true", []),  # a function of its own, builtins
        ("function g { :; }; g", []),
        ("[ -f x ] || { echo no; exit 0; }", []),
        ('"$HOME/bin/agent" --go', []),  # only a run knows the variable
        # A file of the matrix folder the folder does not have: a typo that fails every run.
        ('python3 "$EVALFLEET_MATRIX_DIR/agnt.sh"', ["$EVALFLEET_MATRIX_DIR/agnt.sh"]),
        ('"${EVALFLEET_MATRIX_DIR}/bin/none" --x', ["${EVALFLEET_MATRIX_DIR}/bin/none"]),
        ('bash "$EVALFLEET_MATRIX_DIR/agent.sh"', []),  # it is there
        # Found by a new user's trial, none of them a program run from PATH:
        ("command -v claude >/dev/null || exit 3", []),  # a lookup, which runs nothing
        ('PATH="$EVALFLEET_MATRIX_DIR/bin:$PATH" my-agent', []),  # the command's own PATH
        ('export PATH="$HOME/tools:$PATH"; my-agent', []),
        ("shopt -s expand_aliases; alias zz='echo hi'; zz", []),  # an alias
    ],
)
def test_a_program_the_agent_could_not_start_here_is_warned_of(
    tmp_path: Path, command: str, warned: list[str]
) -> None:
    assert _off_path(tmp_path, command) == warned


def test_a_container_or_a_presets_program_is_not_looked_for_on_this_machine(
    tmp_path: Path,
) -> None:
    """A container has its own programs; a preset's CLI has its own check, which says
    what a missing one makes of the runs."""
    docker = ", sandbox: docker, docker: {image: 'agents:1'}"
    assert _off_path(tmp_path, "agent-in-image --go", docker) == []


def test_a_command_that_goes_into_the_matrix_folder_runs_its_files_rightly(
    tmp_path: Path,
) -> None:
    """`cd "$EVALFLEET_MATRIX_DIR" && ./agent.sh` runs the file beside the matrix: no
    error (it once refused the submit); elsewhere the same `./agent.sh` is one."""
    assert refused_words(tmp_path, 'cd "$EVALFLEET_MATRIX_DIR" && ./agent.sh') == []
    assert refused_words(tmp_path, "cd ${EVALFLEET_MATRIX_DIR}; bash agent.sh") == []
    assert refused_words(tmp_path, "cd /tmp && ./agent.sh") == ["./agent.sh"]


def test_the_agents_own_path_is_where_its_programs_are_looked_for(tmp_path: Path) -> None:
    on_bin = ', env: {PATH: "${EVALFLEET_MATRIX_DIR}/bin:${PATH}"}'
    assert _off_path(tmp_path, "my-tool --go", on_bin) == ["my-tool"]  # not there yet
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "my-tool").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "my-tool").chmod(0o755)
    assert _off_path(tmp_path, "my-tool --go", on_bin) == []
    # A PATH built on a variable only a run has: nothing can be said here.
    assert _off_path(tmp_path, "other-tool", ', env: {PATH: "$TOOLS/bin:$PATH"}') == []


def test_a_host_gate_of_a_docker_experiment_is_warned_of_through_the_cli(tmp_path: Path) -> None:
    """`where: host` runs a gate on the worker as its user, outside the run's container:
    `validate` says so at the gate's `where`, and that the gate may run the agent's code
    with the worker's rights. Only where a tier runs under docker: elsewhere every gate
    is on the worker already, as the run's user."""
    boxed = ', agent: {sandbox: docker, docker: {image: "python:3.11-slim"}}'
    text = f"""\
name: m
runs_per_tier: 1
agent: {{kind: command, command: "true", timeout_s: 30}}
tiers: [{{id: local}}, {{id: boxed{boxed}}}]
scenarios:
  - id: s
    prompt: go
    evaluation:
      gates:
        - {{type: command_succeeds, command: "true"}}
        - {{type: command_succeeds, command: "python3 -m pytest", where: host}}
"""
    path = tmp_path / "matrix.yaml"
    path.write_text(text)
    checked = run_cli("validate", str(path), env=None)
    assert checked.returncode == 0, checked.stderr
    warned = [line for line in checked.stderr.splitlines() if "where: host" in line]
    assert len(warned) == 1
    assert "scenarios.0.evaluation.gates.1.where" in warned[0]
    assert "the worker's rights" in warned[0]
    path.write_text(
        text.replace(', agent: {sandbox: docker, docker: {image: "python:3.11-slim"}}', "")
    )
    unboxed = run_cli("validate", str(path), env=None)
    assert unboxed.returncode == 0 and "where: host" not in unboxed.stderr


GATED = """\
name: m
runs_per_tier: 1
agent: {{kind: command, command: "touch out.txt", timeout_s: 30}}
tiers: [{{id: T0}}]
scenarios:
  - id: s
    prompt: go
    evaluation: {{gates: [{{type: {gate}, command: {command}{extra}}}]}}
"""


@pytest.mark.parametrize(
    ("command", "refused"),
    [
        ('python3 "$EVALFLEET_MATRIX_DIR/checks/missing.py"', ["checks/missing.py"]),
        ("bash ${EVALFLEET_MATRIX_DIR}/check.sh", ["check.sh"]),
        ("my-check --config=$EVALFLEET_MATRIX_DIR/gone.yaml", ["gone.yaml"]),
        ('pytest "$EVALFLEET_MATRIX_DIR/tests/test_gone.py::test_a"', ["tests/test_gone.py"]),
        ('pytest "$EVALFLEET_MATRIX_DIR/checks/here.py::test_a"', []),
        ('python3 "$EVALFLEET_MATRIX_DIR/checks/here.py" out.txt', []),
        ('cd "$EVALFLEET_MATRIX_DIR/checks" && ./here.py', []),
        # The workspace's, which the agent or a template fills; a glob; another variable.
        ("./check.sh && bash check.sh", []),
        ("ls $EVALFLEET_MATRIX_DIR/*.yaml", []),
        ('python3 "$EVALFLEET_MATRIX_DIR/$EVALFLEET_TIER.py"', []),
    ],
)
@pytest.mark.parametrize(
    ("gate", "extra"),
    [
        ("script", ""),
        ("command_succeeds", ""),
        ("command_output_contains", ", substring: ok"),
        ("command_output_matches", ", pattern: ok"),
        ("command_json_path", ", path: $.a, assertion: exists"),
    ],
)
def test_a_gate_naming_a_file_the_matrix_folder_lacks(
    tmp_path: Path, command: str, refused: list[str], gate: str, extra: str
) -> None:
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "here.py").write_text("print('ok')\n")
    path = tmp_path / "matrix.yaml"
    path.write_text(GATED.format(gate=gate, command=json.dumps(command), extra=extra))
    try:
        validate(path)
        found = []
    except ConfigError as exc:
        problems = [problem(p) for p in exc.problems]
        assert {p.field for p in problems} == {"scenarios.0.evaluation.gates.0.command"}
        found = [p.message.split(" names ")[1].split(",")[0] for p in problems]
    assert found == refused


@pytest.mark.parametrize(
    ("sandbox", "warned"), [("auto", True), ("user", True), ("bwrap", False), ("docker", False)]
)
def test_a_folder_others_may_read_is_warned_of_with_its_fixes(
    tmp_path: Path, sandbox: str, warned: bool
) -> None:
    """The matrix, a rubric and a solution, as the submitter's folder holds them: a run's
    own user (`auto`, `user` on a root worker) may read them when the folder lets every
    user in. A jail masks the folder (bwrap), a container never shows it (docker)."""
    (tmp_path / "rubric.yaml").write_text("criteria: [{id: q, weight: 1, description: q}]\n")
    (tmp_path / "solution.sh").write_text("echo answer > out.txt\n")
    path = tmp_path / "matrix.yaml"
    path.write_text(f"""\
name: m
runs_per_tier: 1
agent: {{kind: command, command: "touch out.txt", sandbox: {sandbox}, timeout_s: 30,
        docker: {{image: busybox}}}}
tiers: [{{id: T0}}]
judge: {{model: j, api_key_env: null, base_url: "http://127.0.0.1:9/v1"}}
scenarios:
  - {{id: s, prompt: go, solution: solution.sh,
      evaluation: {{gates: [{{type: file_exists, path: out.txt}}],
                   judge: {{rubric: rubric.yaml}}}}}}
""")
    tmp_path.chmod(0o755)
    readable = [w.message for w in validate(path).warnings if "other users" in w.message]
    if not warned:
        assert readable == []
        return
    assert readable == [
        f"the matrix file {path}, the rubric {tmp_path / 'rubric.yaml'}, the solution "
        f"{tmp_path / 'solution.sh'} may be read by other users of this machine, a run's own "
        "user included (the agents of tier T0 run as one on a root worker): an agent of an "
        "embedded run, or of a worker on this machine, could find this folder and read what "
        "it is graded with (the gates, the `reference:`, the rubrics). "
        f"`chmod o-rx {tmp_path}` (or a folder above it), or set `sandbox: bwrap` on the "
        "agent, whose jail masks the folder"
    ]
    # Nothing graded with but what the run leaves (no gate, no reference, the judge off,
    # no solution): nothing to hide, no warning.
    graded = path.read_text()
    path.write_text(
        graded.replace(" solution: solution.sh,", "")
        .replace("gates: [{type: file_exists, path: out.txt}],", "")
        .replace("judge: {rubric: rubric.yaml}", "judge: {enabled: false, rubric: rubric.yaml}")
    )
    assert [w for w in validate(path).warnings if "other users" in w.message] == []
    path.write_text(graded)
    tmp_path.chmod(0o750)  # the fix it names
    assert [w for w in validate(path).warnings if "other users" in w.message] == []
