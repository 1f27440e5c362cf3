"""`sandbox: docker` through real workers and a real Docker engine (worker.docker_sandbox).

- isolation: the agent cannot read another run's workspace, the worker's
  environment or reach the broker, runs as a non-root user with the env contract,
  and what it left running ends before the gates, which run in its container
  (or on the host, `where: host`); an unconfined tier running the same agent
  shows each check can fail;
- limits: a memory hog is killed at `memory_mb`, a fork bomb stops at `pids` and
  times out, both recorded as failed runs, and the worker goes on;
- nothing stays: no container, no volume (the image declares one) after a run,
  and a container whose worker process died is swept away.

Skipped, with the reason, where no engine answers (tests.support.engine).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import uuid
from pathlib import Path

import pytest
import redis
import yaml
from pydantic import ValidationError

from core.errors import SetupError
from core.matrix import AgentConfig, Matrix
from core.results.run import RunStatus
from core.store import Store
from tests.conftest import EXAMPLES, StartWorker, run_cli
from tests.support.engine import engine_missing
from worker.docker_sandbox import (
    LABEL_HOST,
    LABEL_PID,
    LABEL_RUN,
    LABEL_STARTED,
    agent_container,
    container_env,
    sweep_orphans,
)
from worker.workspace import RunDir

IMAGE = "python:3.11-slim"  # CI provides it (.ci/docker-engine); elsewhere pulled


@pytest.fixture
def engine() -> None:
    if (reason := engine_missing()) is not None:
        pytest.skip(reason)


def _docker(*args: str) -> str:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, check=True, timeout=120
    ).stdout


def _unlabelled_volumes() -> set[str]:
    """The engine's volumes that no compose project made: a run's anonymous volume
    carries no label, while test_compose_engine's projects, which another test worker
    may be running meanwhile, label theirs."""
    listed = _docker(
        "volume", "ls", "--format", '{{.Name}}\t{{.Label "com.docker.compose.project"}}'
    )
    return {
        name
        for name, _, project in (line.partition("\t") for line in listed.splitlines())
        if not project
    }


def _left_behind(exp_id: str) -> list[str]:
    """Containers of the experiment's runs, running or not."""
    listed = _docker("ps", "--all", "--format", f'{{{{.Label "{LABEL_RUN}"}}}}')
    return [run for run in listed.split() if run.startswith(exp_id)]


def _submit(matrix: Path, fleet_env: dict[str, str], store: Store) -> tuple[str, dict]:
    result = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env, timeout=600)
    assert result.returncode in (0, 1), result.stderr + result.stdout[-2000:]  # 1: some runs failed
    exp_id = json.loads(result.stdout)["experiment"]["id"]
    return exp_id, {run.tier: run for run in store.results.all(exp_id)}


PROBE = """
set -u
r=report.txt
[ "$(cat "$PROMPT_FILE")" = "$PROMPT" ] && echo prompt=ok >> $r
g="${{GIT_CONFIG_SYSTEM:-/dev/null/none}}"
grep -qs 'email = agent@evalfleet.invalid' "$g" && echo identity=ok >> $r
(printf '[core]\\n\\thooksPath = /tmp/evil\\n' >> "$g") 2>/dev/null \\
    && echo identity-kept=no >> $r || echo identity-kept=yes >> $r
cat {victim} >/dev/null 2>&1 && echo victim=read >> $r || echo victim=blocked >> $r
grep -qs {canary} /proc/*/environ && echo canary=seen >> $r || echo canary=unseen >> $r
echo "allowed=${{ALLOWED_VAR:-missing}}" >> $r
(exec 3<>/dev/tcp/{host}/{port}) 2>/dev/null && echo broker=open >> $r || echo broker=blocked >> $r
echo "net=$(ls /sys/class/net | tr '\\n' ' ')" >> $r
(sleep 2; touch late.txt) > /dev/null 2>&1 &
echo '{{"type":"tool_call","id":"c1","command":"ls"}}' > "$EVALFLEET_EVENTS"
"""


@pytest.mark.integration
@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_a_docker_run_cannot_read_other_runs_the_worker_env_or_the_broker_and_leaves_nothing(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    # Another run's workspace, where this worker keeps them.
    victim = Path(fleet_env["EVALFLEET_WORKDIR"]) / f"victim-{uuid.uuid4().hex[:6]}/workspace"
    victim.mkdir(parents=True)
    (victim / "secret.txt").write_text("another run's work")
    canary = f"canary-{uuid.uuid4().hex}"
    broker = redis.Redis.from_url(fleet_env["EVALFLEET_BROKER_URL"]).connection_pool
    host_only = tmp_path / "host-only"
    host_only.mkdir()
    # The image declares a volume: the run's anonymous volume must go with its container.
    (tmp_path / "Dockerfile").write_text(f"FROM {IMAGE}\nVOLUME /cache\n")
    command = PROBE.format(
        victim=victim / "secret.txt",
        canary=canary,
        host=broker.connection_kwargs.get("host", "127.0.0.1"),
        port=broker.connection_kwargs.get("port", 6379),
    )
    uid = os.getuid() or 65534  # a root worker's agent runs as nobody
    contains = "{{type: file_contains, path: report.txt, substring: '{}'}}"
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(f"""
name: docker-isolation
runs_per_tier: 1
agent: {{kind: command, command: {json.dumps(command)}, timeout_s: 60}}
tiers:
  - id: boxed
    agent: {{sandbox: docker, docker: {{build: Dockerfile, pass_env: [ALLOWED_VAR]}}}}
  - id: open  # the unconfined control: what docker takes away
    agent: {{pass_env: [ALLOWED_VAR], sandbox: none}}
scenarios:
  - id: s
    prompt: probe the walls
    evaluation:
      gates:
        - {contains.format("victim=blocked")}
        - {contains.format("canary=unseen")}
        - {contains.format("broker=blocked")}
        - {contains.format("net=lo ")}
        - {contains.format("allowed=yes")}
        - {contains.format("prompt=ok")}
        - {contains.format("identity=ok")}
        - {contains.format("identity-kept=yes")}
        - {{type: command_succeeds, command: "sleep 3; test ! -e late.txt"}}
        - {{type: command_succeeds, command: 'test "$(id -u)" = {uid} && test -f /.dockerenv'}}
        - {{type: command_succeeds, command: "test -d {host_only}", where: host}}
""")
    volumes_before = _unlabelled_volumes()
    # Exec'd: the canary must be in its /proc environ, for the box to hide.
    start_worker(
        extra_env={"WORKER_CANARY": canary, "ALLOWED_VAR": "yes"}, concurrency=2, anew=True
    )
    exp_id, runs = _submit(matrix, fleet_env, store)

    boxed = runs["boxed"]
    assert boxed.status is RunStatus.completed, boxed.fail_reason
    assert boxed.passed, [g.message for g in boxed.gates if not g.passed]
    assert boxed.interaction.total_commands == 1  # its events file reached the result
    # The same agent unconfined reads the other run, sees the worker's environment,
    # reaches the broker and the host's network: every check above can fail.
    assert [g.passed for g in runs["open"].gates] == [
        False, False, False, False, True, True, True, False, True, False, True,
    ]  # fmt: skip
    assert _left_behind(exp_id) == []
    assert _unlabelled_volumes() <= volumes_before


@pytest.mark.integration
@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_a_memory_hog_and_a_fork_bomb_are_contained_and_recorded_as_failed_runs(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(f"""
name: docker-limits
runs_per_tier: 1
agent:
  kind: command
  command: touch done.txt
  timeout_s: 60
  sandbox: docker
  docker: {{image: {IMAGE}, cpus: 0.5}}
tiers:
  - id: hog
    agent:
      command: "python3 -c 'b = bytearray(1024 * 1024 * 1024)' && touch done.txt"
      docker: {{image: {IMAGE}, cpus: 0.5, memory_mb: 128}}
  - id: bomb
    agent:
      command: "bomb() {{ while :; do bomb & done; }}; bomb; touch done.txt"
      timeout_s: 8
      docker: {{image: {IMAGE}, cpus: 0.5, pids: 64}}
  - id: fine
scenarios:
  - id: s
    prompt: go
    evaluation: {{gates: [{{type: file_exists, path: done.txt}}]}}
""")
    worker = start_worker(concurrency=1)
    exp_id, runs = _submit(matrix, fleet_env, store)

    hog = runs["hog"]
    assert (hog.status, hog.exit_code, hog.passed) == (RunStatus.agent_error, 137, False)
    bomb = runs["bomb"]
    assert (bomb.status, bomb.passed) == (RunStatus.timeout, False)
    assert runs["fine"].passed, runs["fine"].fail_reason  # the worker went on, unharmed
    assert worker.proc.poll() is None
    assert _left_behind(exp_id) == []


@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_a_container_whose_worker_process_died_is_swept_away(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    host = socket.gethostname()
    started = Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19]
    names = {}
    # "reused": the PID of a live process, but not of the one that labelled it, as
    # when a killed worker's container restarts and numbers its processes from 1 again.
    for owner, pid, start in (
        ("dead", dead.pid, ""),
        ("reused", os.getpid(), str(int(started) - 1)),
        ("alive", os.getpid(), started),
        ("unlabelled", os.getpid(), ""),  # by an evalfleet that labelled no start time
    ):
        names[owner] = f"evalfleet-test-{owner}-{uuid.uuid4().hex[:8]}"
        _docker(
            "run", "--detach", "--name", names[owner],
            "--label", f"{LABEL_HOST}={host}", "--label", f"{LABEL_PID}={pid}",
            "--label", f"{LABEL_STARTED}={start}",
            "--label", f"{LABEL_RUN}=sweep-test", IMAGE, "sleep", "infinity",
        )  # fmt: skip
    try:
        # Any worker's sweep on this host may remove it first (a test session's
        # workers sweep too): what matters is that it is gone and the other is not.
        sweep_orphans()
        listed = _docker("ps", "--all", "--format", "{{.Names}}").split()
        assert names["dead"] not in listed and names["reused"] not in listed
        assert names["alive"] in listed  # its worker process still runs it
        assert names["unlabelled"] in listed
    finally:
        subprocess.run(["docker", "rm", "--force", *names.values()], capture_output=True)


def test_a_worker_without_docker_refuses_rather_than_running_unconfined(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = AgentConfig(command="true", sandbox="docker", docker={"image": IMAGE})
    monkeypatch.setenv("PATH", str(tmp_path))
    with (
        pytest.raises(SetupError, match="no docker CLI"),
        agent_container(agent, "run", RunDir(tmp_path / "run"), {}),
    ):
        pass


def test_sandbox_docker_needs_exactly_one_of_an_image_or_a_dockerfile() -> None:
    with pytest.raises(ValidationError, match="exactly one of `image` or `build`"):
        AgentConfig(command="true", sandbox="docker", docker={})


def test_sandbox_docker_needs_a_docker_image_only_for_scenarios_without_their_own() -> None:
    own = {"id": "t", "prompt": "go", "environment": {"image": IMAGE}}
    plain = {"id": "p", "prompt": "go"}
    bare = {"command": "true", "sandbox": "docker"}
    Matrix.model_validate({"name": "m", "agent": bare, "tiers": [{"id": "a"}], "scenarios": [own]})
    with pytest.raises(ValidationError, match=r"needs a `docker:` section .*: p \[type"):
        Matrix.model_validate(
            {"name": "m", "agent": bare, "tiers": [{"id": "a"}], "scenarios": [own, plain]}
        )


def test_a_presets_container_gets_its_key_and_the_runs_home(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    agent = AgentConfig.model_validate(
        {"preset": "claude-code", "sandbox": "docker", "docker": {"image": IMAGE}}
    )
    run_env = {"PROMPT": "go", "HOME": "/runs/r/home", "XDG_CONFIG_HOME": "/runs/r/home/.config"}
    env = container_env(agent, run_env, {})
    assert env["ANTHROPIC_API_KEY"] == "sk-test"
    # Mounted at its own path: the CLI's session record is read from it afterwards.
    assert (env["HOME"], env["XDG_CONFIG_HOME"]) == ("/runs/r/home", "/runs/r/home/.config")


def test_the_container_env_is_the_run_contract_the_allow_list_and_env_over_the_image(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ALLOWED", "passed")
    monkeypatch.setenv("WORKER_SECRET", "kept out")
    agent = AgentConfig(
        command="true",
        sandbox="docker",
        docker={"image": IMAGE, "pass_env": ["ALLOWED", "NOT_SET"]},
        env={"PATH": "/tools:${PATH}"},
    )
    run_env = {  # what worker.run.agent_env gives an unconfined agent
        "PATH": "/host/bin",
        "WORKER_SECRET": "kept out",
        "PROMPT": "go",
        "PROMPT_FILE": "/host/runs/r/prompt.txt",
        "EVALFLEET_RUN_ID": "r",
        "EVALFLEET_EVENTS": "/host/runs/r/events.jsonl",
    }
    assert container_env(agent, run_env, {"PATH": "/usr/local/bin:/usr/bin"}) == {
        "HOME": "/tmp",
        "ALLOWED": "passed",
        "PROMPT": "go",
        "PROMPT_FILE": "/evalfleet/prompt.txt",
        "EVALFLEET_RUN_ID": "r",
        "EVALFLEET_EVENTS": "/evalfleet/events.jsonl",
        "GIT_CONFIG_SYSTEM": "/evalfleet/gitconfig",  # the run's git identity
        "PATH": "/tools:/usr/local/bin:/usr/bin",  # the image's PATH, not the worker's
    }
    # An image that chose its own git system config keeps it.
    chosen = container_env(agent, run_env, {"GIT_CONFIG_NOSYSTEM": "1"})
    assert "GIT_CONFIG_SYSTEM" not in chosen


def test_a_presets_container_gets_its_variables_and_its_base_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://gateway.internal")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://other.internal/v1")
    agent = AgentConfig.model_validate(
        {"preset": "claude-code", "sandbox": "docker", "docker": {"image": IMAGE}}
    )
    env = container_env(agent, {"PROMPT": "go"}, {})
    assert env["ANTHROPIC_BASE_URL"] == "http://gateway.internal"
    assert env["IS_SANDBOX"] == "1" and "OPENAI_BASE_URL" not in env


def test_the_docker_example_is_the_example_with_only_the_sandbox_added() -> None:
    plain = yaml.safe_load((EXAMPLES / "matrix.yaml").read_text())
    boxed = yaml.safe_load((EXAMPLES / "matrix-docker.yaml").read_text())
    assert boxed["agent"].pop("sandbox") == "docker"
    assert boxed["agent"].pop("docker")["image"] == "evalfleet-example-agent"
    assert boxed == plain


@pytest.mark.integration
@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_the_docker_example_runs_after_building_its_image_as_the_readme_says(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
) -> None:
    _docker("build", "--quiet", "--tag", "evalfleet-example-agent", str(EXAMPLES / "docker"))
    start_worker(concurrency=2)
    exp_id, _ = _submit(EXAMPLES / "matrix-docker.yaml", fleet_env, store)
    info = store.experiments.info(exp_id)
    assert (info.completed_runs, info.errors) == (30, 0)
    runs = store.results.all(exp_id)
    assert {run.status for run in runs} <= {RunStatus.completed, RunStatus.agent_error}
    assert all(run.gates_total for run in runs) and any(run.passed for run in runs)
    assert _left_behind(exp_id) == []
