"""docker-compose.yml, the Dockerfile and .env.example, checked against the real CLI.

No Docker engine runs here, so the compose file is parsed and its variables
substituted as `docker compose` does (from a .env), and then every service's
command is run on this machine: redis-server with the compose flags, two
workers (`--scale worker=2`), Flower, and the scheduler submitting a matrix.
Flower's HTTP API must then show both workers and every run with its final
state. Only what a container changes is adapted: ports, folders, the broker's
host name, and one node name per worker (containers each have a host name).
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import time
import tomllib
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml

from scheduler.embedded import redis_server_binary
from tests.conftest import ROOT
from tests.support.fleet import Service, executable, free_port, services, wait_until

COMPOSE = ROOT / "docker-compose.yml"
REDIS_PORT_FILE = ROOT / "docker-compose.redis-port.yml"
SANDBOX_FILE = ROOT / "docker-compose.docker-sandbox.yml"
ENV_EXAMPLE = ROOT / ".env.example"
DOCKERFILE = ROOT / "Dockerfile"

# --- docker compose's variable substitution -------------------------------------------------

_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_]\w*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|(?P<bare>[A-Za-z_]\w*))"
)


class MissingVariable(ValueError):
    pass


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR?error} and $$."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if isinstance(value, str):
        return _VARIABLE.sub(lambda match: _substitute(match, env), value)
    return value


def _substitute(match: re.Match[str], env: dict[str, str]) -> str:
    if match["escaped"]:
        return "$"
    name = match["braced"] or match["bare"]
    op, arg = match["op"] or "", match["arg"] or ""
    value = env.get(name)
    missing = value is None or (op.startswith(":") and value == "")
    if missing and op.endswith("-"):
        return arg
    if missing and op.endswith("?"):
        raise MissingVariable(f"{name}: {arg}")
    return value or ""


def variables(text: str) -> set[str]:
    return {m["braced"] or m["bare"] for m in _VARIABLE.finditer(text) if not m["escaped"]}


def dotenv(path: Path) -> dict[str, str]:
    pairs = (
        line.split("=", 1)
        for line in path.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )
    return {key.strip(): value.strip() for key, value in pairs}


def compose(env: dict[str, str], path: Path = COMPOSE) -> dict[str, Any]:
    return interpolate(yaml.safe_load(path.read_text()), env)


# --- the files ------------------------------------------------------------------------------


def test_compose_declares_a_password_protected_redis_scalable_workers_flower_and_a_scheduler() -> (
    None
):
    env = dotenv(ENV_EXAMPLE)
    services_ = compose(env)["services"]
    assert set(services_) == {"redis", "worker", "flower", "scheduler"}

    redis_ = services_["redis"]
    command = redis_["command"]
    assert command[0] == "redis-server"
    flags = dict(zip(command[1::2], command[2::2], strict=True))
    assert flags["--requirepass"] == env["REDIS_PASSWORD"]
    assert flags["--appendonly"] == "yes"
    assert flags["--maxmemory-policy"] == "noeviction"
    assert "redis-cli" in " ".join(redis_["healthcheck"]["test"])
    assert any(v.endswith(":/data") for v in redis_["volumes"])

    broker = f"redis://:{env['REDIS_PASSWORD']}@redis:6379/0"
    for name in ("worker", "flower", "scheduler"):
        service = services_[name]
        assert service["environment"]["EVALFLEET_BROKER_URL"] == broker, name
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        # One image, never pulled: the worker builds it, the others run it as built.
        assert (service["image"], service["pull_policy"]) == ("evalfleet:latest", "never"), name
    assert services_["worker"]["build"]["context"] == "."  # the Dockerfile beside it
    assert [n for n, service in services_.items() if "build" in service] == ["worker"]

    worker = services_["worker"]
    # `--scale worker=N` needs no fixed name and no host port.
    assert "container_name" not in worker and "ports" not in worker
    assert worker["command"][:2] == ["scheduler", "worker"]
    grace = float(worker["command"][worker["command"].index("--grace") + 1])
    assert float(worker["stop_grace_period"].rstrip("s")) > grace  # hand back before SIGKILL

    flower = services_["flower"]
    assert flower["command"][:4] == ["celery", "-A", "worker.app", "flower"]
    assert "--persistent=True" in flower["command"]
    # The task list shows each run's id (its args) and outcome (its result).
    columns = next(c for c in flower["command"] if c.startswith("--tasks_columns="))
    assert {"args", "result", "state"} <= set(columns.split("=")[1].split(","))
    assert flower["environment"]["FLOWER_BASIC_AUTH"] == (
        f"{env['FLOWER_USER']}:{env['FLOWER_PASSWORD']}"
    )
    assert any(v.endswith(f":{flower['working_dir']}") for v in flower["volumes"])

    scheduler = services_["scheduler"]
    assert scheduler["profiles"] == ["submit"]
    assert scheduler["command"][:2] == ["scheduler", "submit"]
    # Workers must see the experiment's files at the path the scheduler resolved them at.
    [mount] = [v for v in scheduler["volumes"] if v.split(":")[1] == scheduler["working_dir"]]
    assert mount in worker["volumes"]
    # What submit says of `sandbox: auto` (its own user decides) holds for the workers.
    assert scheduler["user"] == worker["user"] == "0:0"


def test_the_image_is_evalfleet_latest_unless_evalfleet_image_names_another() -> None:
    """Two fleets on one engine (a test session's and a user's) build one image each:
    with a shared tag each build would retag the other's."""
    env = dotenv(ENV_EXAMPLE)
    assert env.pop("EVALFLEET_IMAGE") == "evalfleet:latest"
    assert {s["image"] for s in _evalfleet_services(env)} == {"evalfleet:latest"}
    named = {**env, "EVALFLEET_IMAGE": "evalfleet:test-1a2b"}
    assert {s["image"] for s in _evalfleet_services(named)} == {"evalfleet:test-1a2b"}


def _evalfleet_services(env: dict[str, str]) -> list[dict[str, Any]]:
    return [s for name, s in compose(env)["services"].items() if name != "redis"]


def test_redis_is_published_on_the_host_only_when_asked_and_not_on_6379() -> None:
    """A local Redis usually holds 6379: the fleet's broker is reached by its services
    on their own network; the override file .env.example names publishes it on loopback,
    on a port of its own."""
    env = dotenv(ENV_EXAMPLE)
    assert "ports" not in compose(env)["services"]["redis"]
    example = ENV_EXAMPLE.read_text()
    assert "# COMPOSE_FILE=docker-compose.yml:docker-compose.redis-port.yml" in example
    published = compose(env, REDIS_PORT_FILE)["services"]["redis"]["ports"]
    assert published == ["127.0.0.1:16379:6379"]
    assert compose({}, REDIS_PORT_FILE)["services"]["redis"]["ports"] == ["127.0.0.1:16379:6379"]


def test_the_docker_sandbox_file_gives_workers_the_hosts_engine_and_its_own_paths() -> None:
    """Bind mounts a worker asks the host's engine for name host paths: the runs' folders
    and the files' cache must be at one path inside the worker and on the host."""
    for env, folder in (
        (dotenv(ENV_EXAMPLE), "/var/lib/evalfleet"),
        ({"SANDBOX_DIR": "/srv/fleet"}, "/srv/fleet"),
    ):
        worker = compose(env, SANDBOX_FILE)["services"]["worker"]
        assert worker["volumes"] == [
            "/var/run/docker.sock:/var/run/docker.sock",
            f"{folder}:{folder}",
        ]
        assert worker["environment"]["EVALFLEET_WORKDIR"] == f"{folder}/runs"
        assert worker["environment"]["EVALFLEET_CACHE_DIR"] == f"{folder}/files"
    assert "docker-compose.docker-sandbox.yml" in ENV_EXAMPLE.read_text()


def test_secrets_come_from_an_uncommitted_env_file_documented_by_env_example() -> None:
    text = COMPOSE.read_text() + REDIS_PORT_FILE.read_text() + SANDBOX_FILE.read_text()
    documented = dotenv(ENV_EXAMPLE)
    assert variables(text) <= set(documented), "every compose variable is in .env.example"
    assert ".env" in ROOT.joinpath(".gitignore").read_text().split()
    assert ".env" in ROOT.joinpath(".dockerignore").read_text().split()
    # docs/FLEET.md's password file for the CLI on the host, beside .env.
    assert "redis_pw" in ROOT.joinpath(".gitignore").read_text().split()
    assert "redis_pw" in ROOT.joinpath(".dockerignore").read_text().split()
    for secret in ("REDIS_PASSWORD", "FLOWER_PASSWORD"):
        assert documented[secret] not in text  # no default password baked in
    with pytest.raises(MissingVariable, match=r"REDIS_PASSWORD: set REDIS_PASSWORD in \.env"):
        compose({})


def test_dockerfile_installs_every_package_and_takes_the_build_args_compose_passes() -> None:
    dockerfile = DOCKERFILE.read_text()
    copied = re.findall(r"^COPY (\S+)", dockerfile, flags=re.MULTILINE)
    for source in copied:
        assert (ROOT / source).exists(), f"Dockerfile copies {source}, which does not exist"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for package in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]:
        assert package.rstrip("*") in copied
    assert "pip install --no-deps ." in dockerfile  # after the dependencies, in their own layer
    build_args = compose(dotenv(ENV_EXAMPLE))["services"]["worker"]["build"]["args"]
    assert set(build_args) == set(re.findall(r"^ARG (\w+)", dockerfile, flags=re.MULTILINE))


# --- the services, run here -----------------------------------------------------------------

MATRIX = """
name: compose
runs_per_tier: 2
agent: {kind: command, command: "sleep 1.5; touch out.txt", timeout_s: 60}
tiers: [{id: T0}, {id: T1, agent: {command: "sleep 1.5"}}]  # T1 fails its gate
scenarios:
  - id: s
    prompt: go
    evaluation: {gates: [{type: file_exists, path: out.txt}]}
"""


@pytest.mark.integration
def test_the_compose_services_run_here_and_flower_shows_the_fleet(tmp_path: Path) -> None:
    env_file = {
        **dotenv(ENV_EXAMPLE),
        "REDIS_PASSWORD": secrets.token_hex(12),
        "FLOWER_PASSWORD": secrets.token_hex(12),
        "WORKER_CONCURRENCY": "1",
        "WORKER_GRACE": "5",
        "MATRIX_FILE": "matrix.yaml",
    }
    spec = compose(env_file)["services"]
    password = env_file["REDIS_PASSWORD"]
    auth = (env_file["FLOWER_USER"], env_file["FLOWER_PASSWORD"])
    plain_env = {k: v for k, v in os.environ.items() if not k.startswith("EVALFLEET_")}
    plain_env["EVALFLEET_WARM"] = "0"  # as every test: no warm process left behind

    with services() as fleet:
        port = _start_redis(fleet, spec["redis"], tmp_path)
        broker = f"redis://:{password}@127.0.0.1:{port}/0"

        def env_of(name: str) -> dict[str, str]:
            # The container's environment, with the broker at this machine's address.
            return {
                **plain_env,
                **spec[name]["environment"],
                "EVALFLEET_BROKER_URL": broker,
                "EVALFLEET_WORKDIR": str(tmp_path / "runs"),
                "PYTHONPATH": str(ROOT),
            }

        workers = [f"worker{i}-{uuid.uuid4().hex[:6]}" for i in (1, 2)]
        for name in workers:
            command = [*spec["worker"]["command"], "--hostname", f"{name}@%h"]
            worker = Service(command, env_of("worker"), tmp_path / f"{name}.log")
            fleet.append(worker)
            worker.wait_for("ready.")

        flower_env = {**env_of("flower"), "FLOWER_PORT": str(free_port())}
        flower_dir = tmp_path / "flower-data"
        flower_dir.mkdir()
        flower = _start_flower(fleet, spec["flower"], flower_env, flower_dir, tmp_path / "f1.log")
        api = f"http://127.0.0.1:{flower_env['FLOWER_PORT']}"

        experiment = tmp_path / "experiment"  # what is mounted at /experiment
        experiment.mkdir()
        (experiment / "matrix.yaml").write_text(MATRIX)
        out, err = tmp_path / "submit.out", tmp_path / "submit.err"
        with out.open("w") as stdout, err.open("w") as stderr:
            submit = subprocess.Popen(
                [executable(spec["scheduler"]["command"][0]), *spec["scheduler"]["command"][1:]],
                cwd=experiment,
                env=env_of("scheduler"),
                stdout=stdout,
                stderr=stderr,
            )
            # While it runs, Flower shows the phase each run is in.
            phases: set[str] = set()
            while submit.poll() is None:
                phases |= {task["state"] for task in _tasks(api, auth).values()}
                time.sleep(0.2)
        assert submit.returncode == 0, err.read_text()
        exp_id, _, report = out.read_text().partition("\n")
        exp_id = exp_id.strip()
        assert "| tier |" in report and "T1" in report
        assert "AGENT" in phases

        assert httpx.get(f"{api}/api/tasks", timeout=10).status_code == 401
        runs = _final_run_tasks(api, auth, exp_id, expected=4)
        assert {t["worker"].split("@")[0] for t in runs.values()} <= set(workers)
        for task in runs.values():
            # Each result says first how the run ended (a run whose gate failed is a
            # SUCCESS of its task), then names its experiment and run.
            passed = task["args"].startswith(f"{exp_id}:T0:")
            outcome = "'outcome': 'passed', 'reason': ''" if passed else "'outcome': 'failed', "
            assert task["result"].startswith("{" + outcome), task["result"]
            assert f"'experiment_id': '{exp_id}'" in task["result"]
            assert f"'run_id': '{exp_id}:T" in task["result"]
        # The arguments Flower shows are the run id: experiment, tier, scenario, run index.
        shown = {t["args"] for t in runs.values()}
        assert shown == {f"{exp_id}:{tier}:s:{index}" for tier in ("T0", "T1") for index in (0, 1)}
        listed = httpx.get(f"{api}/api/workers?refresh=1", auth=auth, timeout=30).json()
        assert {w.split("@")[0] for w in listed} >= set(workers)
        metrics = httpx.get(f"{api}/metrics", timeout=10).text
        assert 'task="evalfleet.run",type="task-agent"' in metrics
        # Every event of a run names its task: no phase counted under an empty name.
        for phase in ("task-setup", "task-agent", "task-gates"):
            assert f'task="",type="{phase}"' not in metrics

        # Persistent state: a restarted Flower still knows every run.
        flower.stop()
        _start_flower(fleet, spec["flower"], flower_env, flower_dir, tmp_path / "f2.log")
        assert _final_run_tasks(api, auth, exp_id, expected=4).keys() == runs.keys()


def _start_redis(fleet: list[Service], spec: dict[str, Any], tmp_path: Path) -> int:
    port = free_port()
    data = tmp_path / "redis-data"
    data.mkdir()
    server = redis_server_binary()
    command = [server, *spec["command"][1:], "--port", str(port), "--bind", "127.0.0.1"]
    fleet.append(Service(command, dict(os.environ), tmp_path / "redis.log", cwd=data))
    password = spec["environment"]["REDISCLI_AUTH"]
    client = redis.Redis(port=port, password=password, socket_connect_timeout=1)

    def answers() -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    wait_until(answers, "redis-server with the compose flags")
    assert client.config_get("appendonly")["appendonly"] == "yes"
    assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port).ping()

    # The healthcheck, as written, against this port (containers use 6379).
    kind, check = spec["healthcheck"]["test"]
    assert kind == "CMD-SHELL"
    cli = Path(server).with_name("redis-cli")
    shell = f'redis-cli() {{ "{cli}" -p {port} "$@"; }}; {check}'
    healthy = subprocess.run(["bash", "-c", shell], env={**os.environ, **spec["environment"]})
    assert healthy.returncode == 0
    wrong = {**os.environ, "REDISCLI_AUTH": "wrong"}
    assert subprocess.run(["bash", "-c", shell], env=wrong, capture_output=True).returncode != 0
    return port


def _start_flower(
    fleet: list[Service], spec: dict[str, Any], env: dict[str, str], cwd: Path, log: Path
) -> Service:
    flower = Service(spec["command"], env, log, cwd=cwd)
    fleet.append(flower)
    kind, *check = spec["healthcheck"]["test"]
    assert kind == "CMD"
    check[0] = executable(check[0])

    def healthy() -> bool:
        return subprocess.run(check, env=env, capture_output=True).returncode == 0

    wait_until(healthy, "Flower's healthcheck")
    return flower


def _tasks(api: str, auth: tuple[str, str]) -> dict[str, dict[str, Any]]:
    reply = httpx.get(f"{api}/api/tasks", auth=auth, timeout=10)
    reply.raise_for_status()
    return reply.json()


def _final_run_tasks(
    api: str, auth: tuple[str, str], exp_id: str, expected: int
) -> dict[str, dict[str, Any]]:
    """Flower's run tasks of the experiment, once each shows SUCCESS (events may lag)."""

    def ours() -> dict[str, dict[str, Any]]:
        tasks = _tasks(api, auth)
        runs = {
            uuid_: t
            for uuid_, t in tasks.items()
            if t["name"] == "evalfleet.run" and exp_id in (t["args"] or "")
        }
        aggregated = any(
            t["name"] == "evalfleet.aggregate"
            and exp_id in (t["kwargs"] or "")
            and t["state"] == "SUCCESS"
            for t in tasks.values()
        )
        done = len(runs) == expected and all(t["state"] == "SUCCESS" for t in runs.values())
        return runs if done and aggregated else {}

    return wait_until(ours, f"{expected} successful run tasks in Flower", timeout=60)
