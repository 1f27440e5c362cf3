"""A new user's costly mistakes refused by `validate` and `submit` before anything is
queued (scheduler.mistakes), through the real CLI against a shared broker, and the
fix each message names run end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.store import Store
from tests.conftest import PREFIX, QUEUE, StartWorker, run_cli

pytestmark = pytest.mark.integration

KEY = "EVALFLEET_TEST_UNSET_JUDGE_KEY"

JUDGED = f"""\
name: judged-keyless
runs_per_tier: 2
agent: {{kind: command, command: "echo done > out.txt", timeout_s: 30}}
tiers: [{{id: T0}}]
scenarios:
  - id: plain
    prompt: go
    evaluation: {{gates: [{{type: file_exists, path: out.txt}}]}}
  - id: judged
    prompt: go
    evaluation:
      gates: [{{type: file_exists, path: out.txt}}]
      judge: {{rubric: rubric.yaml}}
judge: {{base_url: "http://127.0.0.1:9/v1", model: judge-model,
         api_key_env: {KEY}}}
"""

AGENT = """\
#!/usr/bin/env python3
import pathlib
pathlib.Path("out.txt").write_text("made by the agent next to the matrix")
"""


@pytest.fixture(autouse=True)
def _closed_to_others(tmp_path: Path, _passable_tmp_path: None) -> None:
    # The matrix folder as the warning on a folder others may read asks it to be (its
    # agents read the shipped copy): only the mistakes each test makes are said.
    tmp_path.chmod(0o700)


def place(text: str, value: str) -> str:
    """`LINE:COLUMN` of `value` in the matrix text, as error messages give it."""
    for number, line in enumerate(text.splitlines(), 1):
        if value in line:
            return f"{number}:{line.index(value) + 1}"
    raise AssertionError(value)


def queued_and_recorded(store: Store) -> tuple[int, int]:
    return store.redis.llen(QUEUE), store.redis.zcard(f"{PREFIX}experiments")


def refused(
    store: Store, env: dict[str, str], matrix: Path, *fragments: str, extra: tuple[str, ...] = ()
) -> None:
    """`validate` and `submit` both exit 2, saying each fragment, and nothing is queued
    or recorded."""
    before = queued_and_recorded(store)
    for command in ("validate", "submit"):
        result = run_cli(command, str(matrix), *extra, env=env, timeout=60)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
        for fragment in (*fragments, "nothing was started"):
            assert fragment in result.stderr, (command, result.stderr)
    assert queued_and_recorded(store) == before


def test_a_judged_scenario_without_its_judge_key_is_refused_unless_allowed(
    tmp_path: Path, fleet_env: dict[str, str], store: Store
) -> None:
    (tmp_path / "rubric.yaml").write_text("criteria: [{id: q, weight: 1, description: q}]\n")
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(JUDGED)
    env = {k: v for k, v in fleet_env.items() if k != KEY}
    refused(
        store,
        env,
        matrix,
        f"matrix.yaml:{place(JUDGED, KEY)}: judge.api_key_env: {KEY} is not set, and "
        "scenario judged is judged: every agent would run",
        "--allow-missing-keys",
    )
    # Set, or allowed (the workers have it): the matrix is good.
    for extra, run_env in (((), {**env, KEY: "sk-test"}), (("--allow-missing-judge-key",), env)):
        result = run_cli("validate", str(matrix), *extra, env=run_env)
        assert result.returncode == 0, result.stderr
    # `enabled: auto` is the other fix: without the key that scenario is not judged.
    matrix.write_text(JUDGED.replace("judge: {rubric", "judge: {enabled: auto, rubric"))
    auto = run_cli("validate", str(matrix), env=env)
    assert auto.returncode == 0, auto.stderr
    assert f"judge: off: {KEY} is not set" in auto.stdout


@pytest.mark.parametrize(
    ("command", "fixed"),
    [
        ("./agent.py", '"$EVALFLEET_MATRIX_DIR/agent.py"'),
        ("agent.py", '"$EVALFLEET_MATRIX_DIR/agent.py"'),  # not on PATH either
        ("python3 agent.py --quick", 'python3 "$EVALFLEET_MATRIX_DIR/agent.py" --quick'),
        ("python3 tools/agent.py", 'python3 "$EVALFLEET_MATRIX_DIR/tools/agent.py"'),
    ],
)
def test_an_agent_file_next_to_the_matrix_named_relatively_is_refused_with_its_fix(
    tmp_path: Path,
    fleet_env: dict[str, str],
    store: Store,
    start_worker: StartWorker,
    command: str,
    fixed: str,
) -> None:
    """Agent commands run in each run's own workspace: `./agent.py` there is not the
    agent.py beside the matrix (every run would exit 127). The message names where
    commands run and the command that works, which then runs."""
    for path in (tmp_path / "agent.py", tmp_path / "tools" / "agent.py"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(AGENT)
        path.chmod(0o755)
    text = f"""\
name: relative
runs_per_tier: 1
agent: {{kind: command, command: '{command}', timeout_s: 30}}
tiers: [{{id: T0}}]
scenarios:
  - {{id: s, prompt: go, evaluation: {{gates: [{{type: file_exists, path: out.txt}}]}}}}
"""
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(text)
    word = next(w for w in command.split() if w.endswith("agent.py"))
    refused(
        store,
        fleet_env,
        matrix,
        f"matrix.yaml:{place(text, repr(command))}: agent.command: {word!r} is a file next to the "
        "matrix, but agent "
        "commands run in each run's own workspace",
        f"(command: {fixed})",
    )
    matrix.write_text(text.replace(f"'{command}'", f"'{fixed}'"))
    start_worker(concurrency=1)
    result = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert result.returncode == 0, result.stderr
    assert "agent.command" not in result.stderr  # the fixed command draws no warning
    report = json.loads(result.stdout)
    assert report["tiers"]["T0"]["passes"] == 1


def test_a_relative_agent_file_the_workspace_gets_is_accepted(
    tmp_path: Path, fleet_env: dict[str, str]
) -> None:
    """The same name copied in by the tier's `files:`, the scenario's template or its
    setup is the workspace's own file: no error. A relative program nothing provides
    and not beside the matrix is a warning that says where commands run."""
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "template").mkdir()
    (tmp_path / "template" / "agent.py").write_text(AGENT)
    text = """\
name: provided
runs_per_tier: 1
agent: {kind: command, command: 'python3 agent.py', timeout_s: 30}
tiers:
  - {id: T0, files: {agent.py: agent.py}}
  - {id: T1, agent: {command: 'python3 ./agent.py && ./run-me.sh'}}
scenarios:
  - {id: templated, prompt: go, workspace: template}
  - {id: setup, prompt: go, setup: ['cp "$EVALFLEET_MATRIX_DIR/agent.py" .']}
"""
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(text)
    result = run_cli("validate", str(matrix), env=fleet_env)
    assert result.returncode == 0, result.stderr
    where = place(text, "'python3 ./agent.py")
    assert result.stderr.splitlines() == [
        f"warning: {matrix}:{where}: tiers.1.agent.command: "
        "'./run-me.sh' is run by a "
        "relative path: agent commands run in each run's own workspace, so it must be there "
        "when the agent starts (put there by a scenario's `workspace:` or `setup:`, or a "
        "tier's `files:`); a file next to the matrix is "
        '"$EVALFLEET_MATRIX_DIR/run-me.sh"'
    ]
    # One scenario whose workspace lacks it is enough to refuse.
    matrix.write_text(text + "  - {id: bare, prompt: go}\n")
    bare = run_cli("validate", str(matrix), env=fleet_env)
    assert bare.returncode == 2, bare.stdout
    assert "tiers.1.agent.command: './agent.py' is a file next to the matrix" in bare.stderr
    assert "agent.command: 'agent.py' is a file next to the matrix" not in bare.stderr


def test_the_tier_files_fix_validate_names_runs_the_agent_it_copies(
    tmp_path: Path, fleet_env: dict[str, str], store: Store, start_worker: StartWorker
) -> None:
    """`command: ./agent.sh` beside the matrix is refused with two fixes; the second, the
    tier's `files: {agent.sh: agent.sh}`, passes validate and then runs: the copy in each
    workspace is still a program (it was a plain file, every run an infrastructure
    error "agent could not start (exit 126): ... Permission denied")."""
    agent = tmp_path / "agent.sh"
    agent.write_text("#!/bin/bash\ntouch out.txt\n")
    agent.chmod(0o755)
    text = """\
name: relfix
runs_per_tier: 2
agent: {command: ./agent.sh}
tiers: [{id: A}]
scenarios: [{id: s1, prompt: p, evaluation: {gates: [{type: file_exists, path: out.txt}]}}]
"""
    matrix = tmp_path / "m.yaml"
    matrix.write_text(text)
    refused(store, fleet_env, matrix, "or copy it into the workspace with the tier's "
            "`files: {agent.sh: agent.sh}`")  # fmt: skip
    matrix.write_text(text.replace("[{id: A}]", "[{id: A, files: {agent.sh: agent.sh}}]"))
    checked = run_cli("validate", str(matrix), env=fleet_env)
    assert checked.returncode == 0, checked.stderr
    start_worker(concurrency=1)
    result = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert result.returncode == 0, result.stderr
    runs = store.results.all(json.loads(result.stdout)["experiment"]["id"])
    assert [(r.status, r.passed, r.fail_reason) for r in runs] == [("completed", True, None)] * 2


GATECHECK = """\
name: gatecheck
runs_per_tier: 2
agent: {command: 'touch out.txt && printf "exit 0\\n" > check.sh'}
tiers: [{id: T0}]
scenarios:
  - id: s2
    prompt: "write out.txt"
    setup: ['cp "${EVALFLEET_MATRIX_DIR}/seeds/seed.txt" .']
    evaluation:
      gates:
        - {type: script, command: 'python3 "$EVALFLEET_MATRIX_DIR/checks/missing.py"'}
        - {type: command_output_contains, substring: ok,
           command: 'python3 $EVALFLEET_MATRIX_DIR/checks/ok.py && bash ./check.sh'}
"""


def test_a_gate_or_setup_naming_a_file_the_matrix_folder_lacks_is_refused(
    tmp_path: Path, fleet_env: dict[str, str], store: Store, start_worker: StartWorker
) -> None:
    """A typo in a gate's script path made every run fail its gate, counted as the agent
    failing (0/2 "gates failed: script"), though validate and preflight passed it. Now
    each file named under $EVALFLEET_MATRIX_DIR that the matrix folder lacks is refused
    at its key; the workspace's `./check.sh`, which the agent writes, is not. Corrected,
    the runs pass."""
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "ok.py").write_text("print('ok')\n")
    (tmp_path / "checks" / "present.py").write_text(
        "import pathlib, sys\nsys.exit(0 if pathlib.Path('out.txt').exists() else 1)\n"
    )
    (tmp_path / "seeds").mkdir()
    (tmp_path / "seeds" / "seed.txt").write_text("seed\n")
    text = GATECHECK
    where = place(text, "'python3 \"$EVALFLEET_MATRIX_DIR/checks/missing.py")
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(text)
    refused(
        store,
        fleet_env,
        matrix,
        f"matrix.yaml:{where}: "
        "scenarios.0.evaluation.gates.0.command: '$EVALFLEET_MATRIX_DIR/checks/missing.py' "
        "names checks/missing.py, which the matrix folder",
        "every run's gate would fail for it, counted as the agent failing. Correct the name, "
        "or add checks/missing.py to the matrix folder",
        "1 problem(s)",  # the setup's file and the other gate's are there; ./check.sh is not
    )
    (tmp_path / "seeds" / "seed.txt").unlink()
    refused(
        store,
        fleet_env,
        matrix,
        "scenarios.0.setup.0: '${EVALFLEET_MATRIX_DIR}/seeds/seed.txt' names seeds/seed.txt",
        "scenarios.0.evaluation.gates.0.command",
        "2 problem(s)",
    )
    (tmp_path / "seeds" / "seed.txt").write_text("seed\n")
    matrix.write_text(text.replace("missing.py", "present.py"))
    checked = run_cli("preflight", str(matrix), env=fleet_env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    start_worker(concurrency=1)
    result = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert result.returncode == 0, result.stderr
    runs = store.results.all(json.loads(result.stdout)["experiment"]["id"])
    assert [(r.status, r.passed) for r in runs] == [("completed", True)] * 2


def test_arguments_and_case_patterns_are_not_taken_for_programs(
    tmp_path: Path, fleet_env: dict[str, str], store: Store, start_worker: StartWorker
) -> None:
    """Only what a command runs is a program: `touch out.txt` writes the workspace's own
    out.txt, whatever lies beside the matrix (it was refused, exit 2), and a case's
    patterns (`T1/s1|T1/s2)`) are no relative programs (each was warned of on every
    validate and submit). Both run as written."""
    (tmp_path / "out.txt").write_text("beside the matrix, not the agent's\n")
    (tmp_path / "T1").mkdir()
    (tmp_path / "T1" / "s2").write_text("a file the case's pattern happens to name\n")
    case = (
        'case "$EVALFLEET_TIER/$EVALFLEET_SCENARIO" in T0/s1|T1/s2) touch out.txt;; '
        "*) exit 3;; esac"
    )
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(f"""\
name: arguments
runs_per_tier: 1
agent: {{kind: command, command: "touch out.txt", timeout_s: 30}}
tiers:
  - {{id: T0}}
  - {{id: T1, agent: {{command: {json.dumps(case)}}}}}
scenarios:
  - {{id: s2, prompt: go, evaluation: {{gates: [{{type: file_exists, path: out.txt}}]}}}}
""")
    checked = run_cli("validate", str(matrix), env=fleet_env)
    assert checked.returncode == 0, checked.stderr
    assert checked.stderr == ""  # not an error, nor a warning
    start_worker(concurrency=1)
    result = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert result.returncode == 0, result.stderr
    assert "agent.command" not in result.stderr
    runs = store.results.all(json.loads(result.stdout)["experiment"]["id"])
    assert sorted((r.tier, r.passed) for r in runs) == [("T0", True), ("T1", True)]


AGENT_KEYED = """\
name: keyed
runs_per_tier: 1
agent: {preset: claude-code}
tiers:
  - {id: T0}
  - {id: T1, agent: {model: claude-opus-4-5}}
  - {id: mine, agent: {kind: command, command: "true", api_key_env: EVALFLEET_TEST_AGENT_KEY}}
scenarios:
  - {id: s, prompt: hi, evaluation: {gates: [{type: command_succeeds, command: "true"}]}}
"""


def test_an_agent_without_its_api_key_is_refused_unless_allowed(
    tmp_path: Path, fleet_env: dict[str, str], store: Store
) -> None:
    # Submitted, every run would be an agent error "Not logged in", counted as a failure.
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(AGENT_KEYED)
    unset = ("ANTHROPIC_API_KEY", "EVALFLEET_TEST_AGENT_KEY")
    env = {k: v for k, v in fleet_env.items() if k not in unset}
    refused(
        store,
        env,
        matrix,
        f"matrix.yaml:{place(AGENT_KEYED, 'claude-code')}: agent.preset: ANTHROPIC_API_KEY is "
        "not set, and the agent of tiers T0, T1 reads it: every run would end as an agent "
        "error (not logged in), counted in the pass rate",
        "EVALFLEET_TEST_AGENT_KEY is not set, and the agent of tier mine reads it",
        "pass --allow-missing-keys",
    )
    keys = {k: "sk-test" for k in unset}
    # Set, or allowed under either name of the flag (the workers have them): good.
    for extra, run_env in (
        ((), {**env, **keys}),
        (("--allow-missing-keys",), env),
        (("--allow-missing-judge-key",), env),
    ):
        result = run_cli("validate", str(matrix), *extra, env=run_env)
        assert result.returncode == 0, (extra, result.stderr)
