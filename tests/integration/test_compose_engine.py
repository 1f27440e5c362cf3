"""docker-compose.yml under a real Docker engine: the fleet a user starts, end to end.

`docker compose up -d --build --wait --scale worker=2` with the repository's
Dockerfile and compose file, unchanged; the example experiment submitted through
the `scheduler` service while a third worker joins, and Flower's API asked with
and without its password; then submitted again while the redis service restarts;
`down -v` whatever happens. The image is the session's own (EVALFLEET_IMAGE), removed
at the end: two sessions on one engine would otherwise rebuild `evalfleet:latest` under
each other (and under a user's fleet). The example is slowed (a `sleep` before each agent,
more runs) so the scale-up and the restart land mid-experiment.

Skipped, with the reason, where no engine answers (tests.support.engine). CI starts
one and provides the base images (.ci/docker-engine).
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from core.store import Store
from core.store.keys import DEFAULT_PREFIX
from tests.conftest import EXAMPLES, ROOT, SESSION
from tests.support.engine import compose_missing
from tests.support.fleet import free_port, wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.docker,
    pytest.mark.timeout(1200),  # the first image build on a cold CI machine
]

RUNS_PER_TIER = 6  # x 3 tiers x 2 scenarios
TOTAL_RUNS = RUNS_PER_TIER * 3 * 2


class Compose:
    """`docker compose` for one test project: its own name, .env and host ports."""

    def __init__(self, project: str, env_file: Path):
        self.base = ["docker", "compose", "--project-name", project, "--env-file", str(env_file)]
        # The broker published on the host (the override file): the test's store reads it.
        for path in ("docker-compose.yml", "docker-compose.redis-port.yml"):
            self.base += ["--file", str(ROOT / path)]

    def argv(self, *args: str) -> list[str]:
        return [*self.base, *args]

    def __call__(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"docker compose {' '.join(args)}:\n{done.stderr[-3000:]}"
        return done.stdout


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Compose, dict[str, str]]]:
    if (reason := compose_missing()) is not None:
        pytest.skip(reason)
    experiment = tmp_path / "experiment"
    shutil.copytree(EXAMPLES, experiment)
    matrix = yaml.safe_load((experiment / "matrix.yaml").read_text())
    matrix["runs_per_tier"] = RUNS_PER_TIER
    matrix["agent"]["command"] = f"sleep 2; {matrix['agent']['command']}"
    (experiment / "matrix.yaml").write_text(yaml.safe_dump(matrix))
    name = f"{SESSION}-{uuid.uuid4().hex[:6]}"
    env = {
        "EVALFLEET_IMAGE": f"evalfleet:test-{name}",
        "REDIS_PASSWORD": secrets.token_hex(16),
        "REDIS_PORT": str(free_port()),  # the machine's own Redis has 6379
        "FLOWER_USER": "admin",
        "FLOWER_PASSWORD": secrets.token_hex(16),
        "FLOWER_PORT": str(free_port()),
        "WORKER_CONCURRENCY": "2",
        "WORKER_GRACE": "5",
        "WORKER_STOP_GRACE": "15s",
        "MATRIX_DIR": str(experiment),
        "MATRIX_FILE": "matrix.yaml",
    }
    env_file = tmp_path / ".env"
    env_file.write_text("".join(f"{key}={value}\n" for key, value in env.items()))
    compose = Compose(f"evalfleet-test-{name}", env_file)
    try:
        yield compose, env
    finally:
        # Containers, network, both volumes and the image's tag: nothing of the test
        # stays behind (its layers stay in the engine's build cache for the next build).
        subprocess.run(compose.argv("down", "-v", "--timeout", "10"), capture_output=True)
        subprocess.run(
            ["docker", "image", "rm", "--no-prune", env["EVALFLEET_IMAGE"]], capture_output=True
        )


def test_the_compose_fleet_runs_the_example_under_a_real_engine_through_scale_up_and_restart(
    stack: tuple[Compose, dict[str, str]], tmp_path: Path
) -> None:
    compose, env = stack
    compose("up", "-d", "--build", "--wait", "--scale", "worker=2", timeout=900)
    built = ["docker", "image", "inspect", env["EVALFLEET_IMAGE"]]
    assert subprocess.run(built, capture_output=True).returncode == 0, "not the session's image"
    api = f"http://127.0.0.1:{env['FLOWER_PORT']}"
    auth = (env["FLOWER_USER"], env["FLOWER_PASSWORD"])
    store = Store.from_url(
        f"redis://:{env['REDIS_PASSWORD']}@127.0.0.1:{env['REDIS_PORT']}/0", prefix=DEFAULT_PREFIX
    )
    workers = wait_until(lambda: _workers(api, auth, 2), "both workers in Flower", timeout=120)

    # 1. The example through the scheduler service; a third worker joins mid-experiment.
    with _Submit(compose, tmp_path / "first.out") as submit:
        phases = _follow(api, auth, submit.exp_id, until=lambda runs: _succeeded(runs) >= 6)
        running = set(compose("ps", "-q").split())
        # As a user scales up: every service's image is the one built, so nothing running
        # is recreated (were each service to build the image, each would be).
        compose("up", "-d", "--wait", "--scale", "worker=3")
        every_worker = wait_until(lambda: _workers(api, auth, 3), "a third worker in Flower")
        assert every_worker > workers
        assert running < set(compose("ps", "-q").split()), "running containers were recreated"
        assert store.experiments.info(submit.exp_id).completed_runs < TOTAL_RUNS, (
            "ended before the scale-up"
        )
        report = submit.report()
    for tier in ("T0", "T1", "T2"):
        assert f"| {tier} |" in report
    _assert_complete(store, submit.exp_id)
    # The worker is root in its container: each run's agent ran as a user of its own.
    assert {run.isolation for run in store.results.all(submit.exp_id)} == {"user"}

    # Flower: nothing without the password; with it, every worker and every run.
    assert httpx.get(f"{api}/api/workers", timeout=10).status_code == 401
    assert httpx.get(f"{api}/api/tasks", timeout=10).status_code == 401

    def all_succeeded() -> dict[str, dict[str, Any]] | None:
        tasks = _run_tasks(api, auth, submit.exp_id)
        return tasks if _succeeded(tasks) == TOTAL_RUNS else None

    runs = wait_until(all_succeeded, f"{TOTAL_RUNS} successful run tasks in Flower", timeout=120)
    assert {task["worker"] for task in runs.values()} == every_worker, "each worker took runs"
    assert {"AGENT", "GATES"} <= phases  # each run's phase, shown while it ran

    # 2. The broker restarts mid-experiment: its AOF volume keeps every queued run
    # and stored result, and the fleet carries on. (Flower misses the task events
    # published while it reconnects: Redis pub/sub keeps none. The store is the record.)
    with _Submit(compose, tmp_path / "second.out") as submit:
        before = wait_until(
            lambda: (i := _info(store, submit.exp_id)) and i.completed_runs >= 6 and i,
            "the second experiment's first results",
            timeout=300,
        )
        assert before.completed_runs < TOTAL_RUNS, "the experiment ended before the restart"
        compose("restart", "redis")
        compose("up", "-d", "--wait", "--no-recreate", "redis")
        after = wait_until(lambda: _info(store, submit.exp_id), "the restarted redis", timeout=60)
        assert after.completed_runs >= before.completed_runs
        assert after.total_runs == TOTAL_RUNS
        submit.report()
    _assert_complete(store, submit.exp_id)


class _Submit:
    """`docker compose run --rm scheduler` in the background: its experiment id, its report."""

    def __init__(self, compose: Compose, out: Path):
        self.compose, self.out = compose, out

    def __enter__(self) -> _Submit:
        with self.out.open("w") as stdout:
            self.proc = subprocess.Popen(
                self.compose.argv("run", "--rm", "scheduler"),
                stdout=stdout,
                stderr=subprocess.PIPE,
                text=True,
            )
        self.exp_id = wait_until(
            lambda: _first_line(self.out), "the experiment id from the scheduler", timeout=120
        )
        return self

    def report(self) -> str:
        _, stderr = self.proc.communicate(timeout=600)
        assert self.proc.returncode == 0, stderr[-3000:]
        return self.out.read_text()

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def _assert_complete(store: Store, exp_id: str) -> None:
    info = store.experiments.info(exp_id)
    assert (info.completed_runs, info.errors, info.finished_at is not None) == (TOTAL_RUNS, 0, True)
    assert len(store.results.all(exp_id)) == TOTAL_RUNS


def _first_line(path: Path) -> str | None:
    line, newline, _ = path.read_text().partition("\n")
    return line.strip() if newline else None


def _workers(api: str, auth: tuple[str, str], count: int) -> set[str]:
    """Flower's workers once it lists `count` of them (refresh: it asks them again)."""
    try:
        listed = httpx.get(f"{api}/api/workers?refresh=1", auth=auth, timeout=30).json()
    except httpx.HTTPError:
        return set()
    return set(listed) if len(listed) >= count else set()


def _run_tasks(api: str, auth: tuple[str, str], exp_id: str) -> dict[str, dict[str, Any]]:
    try:
        reply = httpx.get(f"{api}/api/tasks", auth=auth, timeout=10)
        reply.raise_for_status()
    except httpx.HTTPError:  # Flower reconnecting to the restarted broker
        return {}
    return {
        uuid_: task
        for uuid_, task in reply.json().items()
        if task["name"] == "evalfleet.run" and exp_id in (task["args"] or "")
    }


def _succeeded(runs: dict[str, dict[str, Any]]) -> int:
    return sum(task["state"] == "SUCCESS" for task in runs.values())


def _follow(api: str, auth: tuple[str, str], exp_id: str, until: Any) -> set[str]:
    """The phases Flower showed for the experiment's runs, polled until `until(runs)`."""
    phases: set[str] = set()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        runs = _run_tasks(api, auth, exp_id)
        phases |= {task["state"] for task in runs.values()}
        if until(runs):
            return phases
        time.sleep(0.2)
    raise AssertionError(f"runs of {exp_id} did not progress in Flower: {phases}")


def _info(store: Store, exp_id: str) -> Any:
    try:
        return store.experiments.info(exp_id)
    except Exception:  # redis still loading its AOF, or not up yet
        return None
