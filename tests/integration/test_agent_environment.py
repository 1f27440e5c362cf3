"""What of the worker's environment reaches an agent, and what every process needs
before it starts, with real workers and the CLI:

- the agent's environment is an allow-list (worker.environ.inherited): a credential
  the worker was started with reaches no agent, evidence or judge unless the matrix
  passes it by name (`agent.pass_env`), and then every stored copy is redacted;
- every path a matrix names lies inside its folder: `submit` refuses one outside
  before anything is enqueued;
- a worker or Flower without a broker says so in one line instead of joining
  whatever Redis listens on this machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from core.store import Store
from tests.conftest import ROOT, StartWorker, run_cli, shared_with_agents
from tests.support.llm_stub import LLMStub, scripted_judge
from worker.broker import NO_BROKER

# Everything the agent was given, where the test reads it, and on its stdout, which
# becomes evidence and the judge's transcript.
# Its XDG folders are its to make (the XDG spec's way): out.txt, which the gate checks,
# only once it has written a setting and a cache entry there.
PRINT_ENV = (
    'env > "{seen}/$EVALFLEET_TIER.env"; env; mkdir -p "$XDG_CONFIG_HOME/app" "$XDG_CACHE_HOME" '
    '&& echo x > "$XDG_CONFIG_HOME/app/settings" && echo y > "$XDG_CACHE_HOME/c" && touch out.txt'
)


def _variables(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and line[0].isalpha())


@pytest.mark.integration
def test_the_agent_gets_no_unlisted_variable_of_the_worker_and_a_passed_one_is_redacted(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    secret = f"aws-secret-{uuid.uuid4().hex}"
    plain = f"plain-{uuid.uuid4().hex}"
    seen = shared_with_agents(tmp_path / "seen", folder=True)

    judge = scripted_judge({}, model_scores={"judge-model": 1.0})
    (tmp_path / "rubric.yaml").write_text("criteria: [{id: quality, weight: 1, description: q}]\n")
    with LLMStub([judge] * 2) as stub:
        matrix = tmp_path / "matrix.yaml"
        matrix.write_text(f"""
name: environment
runs_per_tier: 1
agent:
  kind: command
  command: {json.dumps(PRINT_ENV.format(seen=seen))}
  timeout_s: 30
  env: {{TIER_SETTING: from-the-matrix}}
tiers:
  - {{id: unlisted}}
  - {{id: passed, agent: {{pass_env: [AWS_SECRET_ACCESS_KEY]}}}}
judge: {{base_url: "{stub.base_url}", model: judge-model, api_key_env: null, max_attempts: 1}}
scenarios:
  - id: s
    prompt: "go ({uuid.uuid4().hex})"
    evaluation:
      gates: [{{type: file_exists, path: out.txt}}]
      judge: {{rubric: rubric.yaml}}
""")
        worker = start_worker({"AWS_SECRET_ACCESS_KEY": secret, "UNLISTED_SETTING": plain})
        submitted = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert submitted.returncode == 0, submitted.stderr
    exp_id = json.loads(submitted.stdout)["experiment"]["id"]
    report = run_cli("report", exp_id, "--format", "json", "--runs", env=fleet_env)

    unlisted, passed = _variables(seen / "unlisted.env"), _variables(seen / "passed.env")
    # Without pass_env: neither the credential nor any other unlisted variable...
    assert "AWS_SECRET_ACCESS_KEY" not in unlisted and "UNLISTED_SETTING" not in unlisted
    assert not any(name.startswith("EVALFLEET_BROKER") for name in unlisted)
    # ... but what an agent needs: PATH, a HOME of its run's own (not the worker's, and
    # not the other run's), the run's variables and the tier's env.
    assert unlisted["PATH"] == fleet_env["PATH"]
    assert unlisted["HOME"] != fleet_env["HOME"] and unlisted["HOME"] != passed["HOME"]
    assert unlisted["HOME"].endswith("/home") and unlisted["XDG_CONFIG_HOME"].startswith(
        unlisted["HOME"]
    )
    assert unlisted["EVALFLEET_TIER"] == "unlisted" and unlisted["PROMPT"].startswith("go (")
    assert unlisted["TIER_SETTING"] == "from-the-matrix"
    # Passed by name: the agent sees it, and nothing stored or judged does.
    assert passed["AWS_SECRET_ACCESS_KEY"] == secret and "UNLISTED_SETTING" not in passed
    runs = {run.tier: run for run in store.results.all(exp_id)}
    assert set(runs) == {"unlisted", "passed"} and all(run.passed for run in runs.values())
    evidence = {}
    for tier, run in runs.items():
        found = store.evidence.get(exp_id, run.run_id)
        assert found is not None
        evidence[tier] = found
    assert "AWS_SECRET_ACCESS_KEY=[REDACTED]" in evidence["passed"].stdout.text
    assert "AWS_SECRET_ACCESS_KEY" not in evidence["unlisted"].stdout.text
    stored = [e.model_dump_json() for e in evidence.values()]
    stored += [run.model_dump_json() for run in runs.values()]
    stored += [report.stdout, submitted.stdout, worker.log.read_text()]
    assert not any(secret in text or plain in text for text in stored)
    judged = [request.raw.decode() for request in stub.requests]
    assert len(judged) == 2 and any("[REDACTED]" in text for text in judged)
    assert not any(secret in text or plain in text for text in judged)


@pytest.mark.integration
def test_submit_refuses_a_path_outside_the_matrix_folder_and_enqueues_nothing(
    fleet_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    (tmp_path / "private.txt").write_text("the submitter's private file")
    folder = tmp_path / "matrix"
    folder.mkdir()
    matrix = folder / "matrix.yaml"
    matrix.write_text("""
name: outside
runs_per_tier: 1
agent: {kind: command, command: "cat $PROMPT_FILE", timeout_s: 30}
tiers: [{id: T0}]
scenarios: [{id: s, prompt_file: ../private.txt}]
""")
    before = store.experiments.latest()
    refused = run_cli("submit", str(matrix), "--json", env=fleet_env)
    assert refused.returncode == 2, refused.stdout
    assert "Traceback" not in refused.stderr
    expected = f"scenarios.0.prompt_file: {tmp_path / 'private.txt'} is outside the matrix folder"
    assert expected in refused.stderr and "allow_outside_files: true" in refused.stderr
    assert store.experiments.latest() == before


# Each entry point that starts a worker or Flower, as a user starts it by hand.
ENTRY_POINTS = {
    "flower": [sys.executable, "-m", "celery", "-A", "worker.app", "flower"],
    "celery worker": [sys.executable, "-m", "celery", "-A", "worker.app", "worker"],
    "python -m worker": [sys.executable, "-m", "worker", "--concurrency", "1", "--queues", "q"],
}


@pytest.mark.integration
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_an_entry_point_without_a_broker_says_so_in_one_line(tmp_path: Path, entry: str) -> None:
    """Without EVALFLEET_BROKER_URL it used to join redis://127.0.0.1:6379/0, whoever's
    Redis that is. Run from a folder with no embedded Redis of `scheduler`."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("BROKER_URL")}
    env["PYTHONPATH"] = str(ROOT)
    started = subprocess.run(
        ENTRY_POINTS[entry], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert started.returncode != 0
    assert started.stderr.strip().splitlines() == [NO_BROKER], started.stderr


# What an agent that commits does, and one that would leave a hook to every later run's
# git by writing the identity file it is handed (git's system config).
COMMIT = (
    "git config --system --get-all core.hookspath > planted.txt; "
    "git init -q . && git add -A && git commit -q --allow-empty -m work "
    '&& git log --format="%an <%ae>" > who.txt; '
    'printf "[core]\\n\\thooksPath = /tmp/evil\\n" >> "$GIT_CONFIG_SYSTEM"; true'
)
# The default identity, its email the run's EMAIL where it has one (git's order).
DEFAULT_IDENTITY = 'grep -qx "evalfleet agent <${EMAIL:-agent@evalfleet.invalid}>" who.txt'
OWN_CONFIG = (
    "git config --global user.name 'Run Person' && git config --global user.email "
    "person@example.org && git init -q . && git config user.email repo@example.org "
    '&& git commit -q --allow-empty -m work && git log --format="%an <%ae>" > who.txt'
)


@pytest.mark.integration
def test_an_agents_commits_have_an_identity_its_own_config_wins_and_no_run_changes_the_next(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """Run users have no passwd entry and a run's home no git config: git refused every
    commit ("unable to auto-detect name"). Each run gets a default identity as git's
    system config, below the run's global config and the repository's (and leaving the
    email to a run's EMAIL, as git would); in every sandbox, none of them can change it
    for the runs after it."""
    command = f'if [ "$EVALFLEET_SCENARIO" = its-own ]; then {OWN_CONFIG}; else {COMMIT}; fi'
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(f"""
name: git-identity
runs_per_tier: 2
agent: {{kind: command, command: {json.dumps(command)}, timeout_s: 30}}
tiers:
  - {{id: own-user}}
  - {{id: bwrap, agent: {{sandbox: bwrap}}}}
  - {{id: unconfined, agent: {{sandbox: none}}}}
  - {{id: own-email, agent: {{env: {{EMAIL: bot@example.org}}}}}}
scenarios:
  - id: defaults
    prompt: commit
    evaluation:
      gates:
        - {{type: command_succeeds, command: {json.dumps(DEFAULT_IDENTITY)}}}
        - {{type: command_succeeds, command: "test -f planted.txt && ! test -s planted.txt"}}
  - id: its-own
    prompt: commit as yourself
    evaluation:
      gates: [{{type: file_contains, path: who.txt, substring: "Run Person <repo@example.org>"}}]
""")
    # One pool process: each run after the first takes over the folder the one before
    # left (worker.workspace.put_away), and its identity file with it.
    start_worker(concurrency=1)
    submitted = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert submitted.returncode == 0, submitted.stderr
    exp_id = json.loads(submitted.stdout)["experiment"]["id"]
    runs = list(store.results.all(exp_id))
    assert len(runs) == 16
    failed = {(r.tier, r.scenario, r.run_index): r.fail_reason for r in runs if not r.passed}
    assert failed == {}
