"""Benchmark tasks run end to end (core.evaluation.verifier, worker.sandbox): each run's
agent works in the task's /app inside a bwrap jail (the default for a task), then the
task's verifier runs in the same jail with the tests at /tests and its rewards at
/logs/verifier decide the run.

The tasks are written here by hand, as Harbor lays them out: tests/test.sh writing
reward.txt or reward.json, solution/solve.sh. Real processes, a real worker:
- the oracle (the task's own solution) passes every sound task and an agent that does
  nothing passes none; reward.json's named numbers are the run's rewards;
- a verifier that writes no reward is the run's failure, saying so, and `show` prints
  what the verifier printed;
- an agent that searches /tests, /solution, /logs and the shipped folder for the
  hidden answer never finds it;
- `scheduler preflight` runs the oracle and the verifier on the untouched task in the
  jail, once per task, and exits 2 naming the broken task and the vacuous one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from core.modelserver import ModelServer
from core.results.run import RunStatus
from core.store import Store
from tests.conftest import FIXTURES, StartWorker, run_cli
from tests.integration.test_real_agent_clis import CASES, KEY, cli_path, script_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]

# The answer only the solution and the tests hold (joined here, so that this file,
# which the hunter can read, does not hold it).
SECRET = "-".join(("hidden", "answer", "5b1e77"))
# What the hunter greps for: matches SECRET, not itself.
SEARCHED = "hidden-answe[r]-5b1e77"

TASKS = {
    # Harbor's usual: one number in reward.txt.
    "sound": f"""echo checking /app/answer.txt
if grep -qx {SECRET} /app/answer.txt 2>/dev/null; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
""",
    # Named numbers; a non-number (details) is no reward.
    "multi": f"""ok=0; grep -qx {SECRET} /app/answer.txt 2>/dev/null && ok=1
printf '{{"correctness": %s, "style": 1, "details": {{"note": "x"}}}}' "$ok" \\
  > /logs/verifier/reward.json
""",
    # Broken: says it passed but writes no reward.
    "silent": "echo all good\n",
    # A reward written as text: no number, whatever the rest says.
    "stringly": 'printf \'{"correctness": "1", "style": 1}\' > /logs/verifier/reward.json\n',
    # Vacuous: rewards an untouched /app.
    "vacuous": "echo 1 > /logs/verifier/reward.txt\n",
}
# Sound, but its solution fails without a word (the test writes its solve.sh).
TASKS["unsolved"] = TASKS["sound"]

# Looks for the answer wherever a run can read, and answers with what it found. The
# jail's root (/app/..) holds the host's folders: the system's software and package
# caches, gigabytes no run's file is copied into, are left out, or the search of a
# cold disk outlasts any timeout.
HUNT = r"""
found=""
skip="--exclude-dir=proc --exclude-dir=sys --exclude-dir=usr --exclude-dir=opt"
skip="$skip --exclude-dir=cache --exclude-dir=node_modules --exclude-dir=site-packages"
for place in /tests /solution /logs "$EVALFLEET_MATRIX_DIR" /app/.. "$HOME" /tmp; do
  hit=$(grep -rIl $skip -e "$SECRET_WORD" "$place" 2>/dev/null | head -3)
  [ -n "$hit" ] && found="$found $hit"
done
echo "found:[$found]"
echo "${found:-unknown}" > /app/answer.txt
"""


def _write_tasks(folder: Path, names: list[str]) -> str:
    """The tasks' folders under `folder`, and their scenarios as matrix YAML."""
    scenarios = []
    for name in names:
        task = folder / "tasks" / name
        (task / "tests").mkdir(parents=True)
        (task / "solution").mkdir()
        (task / "tests" / "test.sh").write_text(TASKS[name])
        (task / "solution" / "solve.sh").write_text(f"echo {SECRET} > answer.txt\n")
        scenarios.append(f"""
  - id: {name}
    prompt: Write the answer to /app/answer.txt.
    tests: tasks/{name}/tests
    solution: tasks/{name}/solution
    environment: {{workdir: /app}}
    verifier: {{command: "bash /tests/test.sh", timeout_s: 30}}""")
    return "".join(scenarios)


def _matrix(folder: Path, names: list[str], tiers: str) -> Path:
    folder.mkdir()
    matrix = folder / "matrix.yaml"
    matrix.write_text(f"""
name: tasks
runs_per_tier: 1
agent: {{command: "true", transcript: plain, timeout_s: 60}}
tiers:{tiers}
scenarios:{_write_tasks(folder, names)}
""")
    folder.chmod(0o700)  # the tests hidden from this machine's other users too
    return matrix


TIERS = f"""
  - {{id: oracle, agent: {{preset: oracle}}}}
  - {{id: nothing}}
  - {{id: hunter, agent: {{command: {json.dumps(HUNT)}, env: {{SECRET_WORD: "{SEARCHED}"}}}}}}"""


def test_the_oracle_passes_sound_tasks_and_nothing_passes_none_and_no_agent_finds_the_answer(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    matrix = _matrix(tmp_path / "exp", ["sound", "multi", "silent", "stringly"], TIERS)
    start_worker(concurrency=2)
    done = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert done.returncode == 0, done.stderr
    exp_id = json.loads(done.stdout)["experiment"]["id"]
    runs = {(r.tier, r.scenario): r for r in store.results.all(exp_id)}
    assert len(runs) == 12
    assert {r.isolation for r in runs.values()} == {"bwrap"}
    assert all(r.status is RunStatus.completed for r in runs.values()), [
        (k, r.status, r.fail_reason) for k, r in runs.items()
    ]

    oracle = {s: runs["oracle", s] for s in ("sound", "multi")}
    assert all(r.passed for r in oracle.values()), [r.fail_reason for r in oracle.values()]
    assert oracle["sound"].rewards == {"reward": 1.0}
    assert oracle["multi"].rewards == {"correctness": 1.0, "style": 1.0}

    nothing = {s: runs["nothing", s] for s in ("sound", "multi")}
    assert not any(r.passed for r in nothing.values())
    assert nothing["sound"].rewards == {"reward": 0.0}
    assert nothing["sound"].fail_reason == "reward 0 < 1 (pass_reward)"
    assert nothing["multi"].fail_reason == "reward correctness 0 < 1 (pass_reward)"

    # "1" is no reward: the run does not pass on the style alone.
    for tier in ("oracle", "nothing"):
        stringly = runs[tier, "stringly"]
        assert not stringly.passed and stringly.rewards == {}
        assert stringly.fail_reason == (
            "verifier: reward.json's 'correctness' holds '1', not a number"
        )
    # No reward file: the task's verdict on the run, whoever ran.
    for tier in ("oracle", "nothing"):
        silent = runs[tier, "silent"]
        assert not silent.passed and silent.rewards == {}
        assert silent.fail_reason == "verifier: no /logs/verifier/reward.txt or reward.json"
    shown = run_cli("show", runs["oracle", "silent"].run_id, env=fleet_env)
    assert shown.returncode == 0, shown.stderr
    assert "Verifier: no rewards" in shown.stdout
    assert "$ bash /tests/test.sh  [exit 0]" in shown.stdout and "all good" in shown.stdout
    passed = run_cli("show", runs["oracle", "sound"].run_id, env=fleet_env).stdout
    assert "Verifier: reward 1" in passed and "checking /app/answer.txt" in passed

    for scenario in ("sound", "multi", "silent"):
        hunter = runs["hunter", scenario]
        evidence = store.evidence.get(exp_id, hunter.run_id)
        assert evidence is not None
        assert "found:[]" in evidence.stdout.text, evidence.stdout.text
        assert not hunter.passed
        assert SECRET not in evidence.stdout.text


def test_preflight_runs_the_oracle_and_the_verifier_in_the_jail_and_names_broken_and_vacuous_tasks(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    tiers = """
  - {id: a}
  - {id: b}"""
    matrix = _matrix(tmp_path / "exp", ["sound", "silent", "vacuous", "unsolved"], tiers)
    (matrix.parent / "tasks" / "unsolved" / "solution" / "solve.sh").write_text("exit 3\n")
    checked = run_cli("preflight", str(matrix), env=fleet_env)
    assert checked.returncode == 2, (checked.stdout, checked.stderr)
    rows = {tuple(line.split()[:2]): line.split() for line in checked.stdout.splitlines()}
    # Columns: tier, scenario, cli, run, transcript, gates, vacuous, reference, ...
    assert [rows["a", s][6:8] for s in ("sound", "silent", "vacuous", "unsolved")] == [
        ["no", "passes"],
        ["no", "fails"],
        ["yes", "passes"],
        ["no", "fails"],
    ]
    problems = [line for line in checked.stderr.splitlines() if line.startswith("scenario ")]
    # Each once, for all tiers: run once per task, not per tier.
    assert problems == [
        "scenario silent: the oracle (the task's solution) fails: "
        "verifier: no /logs/verifier/reward.txt or reward.json",
        "scenario vacuous: its verifier passes the untouched environment: its tests check nothing",
        # Nothing said: no colon left dangling after its exit code.
        "scenario unsolved: the oracle (the task's solution) fails: solve.sh: exit code 3",
    ], checked.stderr


def test_a_real_agent_cli_in_a_tasks_jail_reaches_its_model(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """Claude Code under the jail a task gets (`auto`, the run's own uid, a tmpfs root)
    makes its requests to the scripted server on loopback: the jail keeps the network
    for an agent CLI, whose install (EVALFLEET_TEST_AGENT_CLIS) and home it reaches."""
    [case] = [c for c in CASES if c.preset == "claude-code"]
    binary = Path(cli_path(case.cli))
    folder = tmp_path / "exp"
    folder.mkdir()
    tests = folder / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text(
        "grep -q hello /app/out.txt && echo 1 > /logs/verifier/reward.txt"
        " || echo 0 > /logs/verifier/reward.txt\n"
    )
    with ModelServer(script_for(case)) as server:
        worker_env = {"ANTHROPIC_API_KEY": KEY, case.base_url_env: server.base_url}
        matrix = folder / "matrix.yaml"
        matrix.write_text(f"""
name: real-cli-task
runs_per_tier: 1
agent: {{preset: claude-code, model: {case.model}, timeout_s: 180,
         env: {{PATH: "{binary.parent}:${{PATH}}"}}}}
tiers: [{{id: claude}}]
scenarios:
  - id: write
    prompt: Create out.txt holding the word hello.
    tests: tests
    environment: {{workdir: /app}}
    verifier: {{command: "bash /tests/test.sh", timeout_s: 30}}
""")
        start_worker(extra_env=worker_env, concurrency=1)
        submitted = run_cli(
            "submit", str(matrix), "--wait", "--json", "--allow-missing-keys", env=fleet_env
        )
        served = [r for r in server.model_requests() if r.body and r.body.get("tools")]
    assert submitted.returncode == 0, submitted.stderr
    (run,) = store.results.all(json.loads(submitted.stdout)["experiment"]["id"])
    assert run.isolation == "bwrap"
    assert [r.turn for r in served] == [0, 1], store.evidence.get(run.experiment_id, run.run_id)
    assert run.passed and run.rewards == {"reward": 1.0}, run.fail_reason


def test_a_task_with_an_image_of_its_own_is_not_run_on_this_system_without_docker(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """Under `sandbox: auto` a task built from its own Dockerfile ran on the worker's
    system, its tests judging another system: its sound oracle failed, counted against
    the agent. It is an infrastructure error now, named, and `validate` warned of it."""
    folder = tmp_path / "exp"
    shutil.copytree(FIXTURES / "tasks" / "own-image", folder / "tasks" / "own-image")
    matrix = folder / "matrix.yaml"
    matrix.write_text(
        "name: imaged\nruns_per_tier: 1\nagent: {preset: oracle}\ntiers: [{id: T0}]\n"
        "scenarios: [{task: tasks/own-image}]\nfail_fast: 0\n"
    )
    start_worker(concurrency=1)
    done = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert done.returncode == 3, done.stderr
    assert "need" in done.stderr and "own image" in done.stderr  # validate's warning
    [run] = store.results.all(json.loads(done.stdout)["experiment"]["id"])
    assert run.status is RunStatus.infra_error and not run.passed
    assert run.fail_reason == (
        "this benchmark task runs in its own image (`environment.image` or a Dockerfile to "
        "build), which `sandbox: auto` does not give it; set `sandbox: docker` on the agent"
    )
