"""Benchmark task folders under `sandbox: docker` through `scheduler submit`, real
workers and a real Docker engine (worker.docker_sandbox): the fixture tasks that need
an image of their own (built from their Dockerfile, `FROM` the base image the worker
is given in EVALFLEET_TASK_BASE_IMAGE) and two that run anywhere (in `agent.docker`'s
image).

- the oracle tier (each task's solution, at /solution) passes every task; a
  do-nothing tier passes none; the rewards are in the report;
- each task image is built once, however many runs and pool processes use it;
- an agent that searches the container for the hidden tests or the solution (as
  root in it) finds neither: the answer-in-tests task stays failed;
- `scheduler preflight` checks each task in its container and names exactly the
  broken and the vacuous task, and says when a preset CLI in a container cannot
  reach its scripted model server (the worker's loopback is not the container's).

Skipped, with the reason, where no engine answers (tests.support.engine).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from core.store import Store
from tests.conftest import FIXTURES, StartWorker, run_cli
from tests.support.engine import engine_missing
from tests.support.tasks import BROKEN, UNSOUND, VACUOUS, problems
from worker.docker_sandbox import LABEL_RUN, task_tag

pytestmark = [pytest.mark.integration, pytest.mark.docker]

BASE = "python:3.11-slim"  # CI's local stand-in (.ci/docker-engine)
OWN_IMAGE = ("own-image", "multi-file-env", "tb-own-image")
ANYWHERE = ("hello-file", "answer-in-tests")
BUILT = re.compile(r"building the task image (evalfleet-task:\w+)")

# An agent that knows nothing of the task but where a benchmark keeps its answers:
# it copies any expected.txt it can find and runs any solve.sh.
SEARCHER = (
    "for f in $(find / \\( -path /proc -o -path /sys \\) -prune -o "
    "\\( -name expected.txt -o -name solve.sh \\) -print 2>/dev/null); do "
    'case "$f" in *expected.txt) cat "$f" > codename.txt ;; *) bash "$f" ;; esac; done; '
    "ls -la /tests /solution >&2; true"
)


@pytest.fixture(autouse=True)
def engine() -> None:
    if (reason := engine_missing()) is not None:
        pytest.skip(reason)


def _dataset(folder: Path, names: tuple[str, ...], tiers: str) -> None:
    """The tasks `names` copied under `folder`/tasks, each Dockerfile made new (a
    comment) so that its image is built by this test, and a matrix running them."""
    tasks = folder / "tasks"
    tasks.mkdir(parents=True)
    tasks.chmod(0o700)
    nonce = uuid.uuid4().hex
    for name in names:
        shutil.copytree(FIXTURES / "tasks" / name, tasks / name)
        for dockerfile in (tasks / name).rglob("Dockerfile"):
            dockerfile.write_text(dockerfile.read_text() + f"\n# {nonce}\n")
    # The answer-in-tests agent runs as root in its container: only the masks and
    # the empty /tests keep the answer from it, not file modes.
    entries = "\n".join(
        f"  - {{task: tasks/{name}, environment: {{agent_user: root}}}}"
        if name == "answer-in-tests"
        else f"  - {{task: tasks/{name}}}"
        for name in names
    )
    (folder / "matrix.yaml").write_text(f"""
name: docker-tasks
runs_per_tier: 1
agent:
  kind: command
  command: "true"
  timeout_s: 120
  sandbox: docker
  docker: {{image: {BASE}}}
tiers:
{tiers}
scenarios:
{entries}
""")


def _built(log: Path) -> list[str]:
    return BUILT.findall(log.read_text(errors="replace"))


def _remove_images(tags: list[str]) -> None:
    if tags:
        # The tags only, not their untagged parents: another test's build of the same
        # Dockerfile may be using them as its cache (test_task_fixtures).
        subprocess.run(
            ["docker", "image", "rm", "-f", "--no-prune", *tags], capture_output=True, timeout=120
        )


def test_task_folders_run_in_their_own_images_with_the_verifier_in_the_container(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    names = (*OWN_IMAGE, *ANYWHERE)
    _dataset(
        tmp_path,
        names,
        f"""  - {{id: oracle, agent: {{preset: oracle}}}}
  - {{id: nothing}}
  - {{id: searcher, agent: {{command: {json.dumps(SEARCHER)}}}}}""",
    )
    worker = start_worker(concurrency=2, extra_env={"EVALFLEET_TASK_BASE_IMAGE": BASE})
    try:
        done = run_cli(
            "submit", str(tmp_path / "matrix.yaml"), "--wait", "--json", env=fleet_env, timeout=900
        )
        assert done.returncode in (0, 1), done.stderr + done.stdout[-2000:]
        report = json.loads(done.stdout)
        exp_id = report["experiment"]["id"]
        runs = store.results.all(exp_id)
        assert len(runs) == 3 * len(names)
        assert {run.isolation for run in runs} == {"docker"}
        errors = [(r.tier, r.scenario, r.fail_reason) for r in runs if r.is_infra_error]
        assert errors == []

        def passed(tier: str) -> set[str]:
            cells = report["tiers"][tier]["scenarios"]
            assert set(cells) == set(names) and all(c["counted"] == 1 for c in cells.values())
            return {name for name, cell in cells.items() if cell["passes"]}

        assert passed("oracle") == set(names)
        assert passed("nothing") == set()
        # Root in its container, it searched everywhere: no tests, no solution.
        assert passed("searcher") == set()
        searched = next(r for r in runs if (r.tier, r.scenario) == ("searcher", "answer-in-tests"))
        assert searched.rewards == {"reward": 0.0}, searched.fail_reason
        assert {"reward", "tests"} <= set(report["tiers"]["oracle"]["rewards"])
        # Three task images, each built once for its three runs over two pool processes.
        assert len(_built(worker.log)) == len(OWN_IMAGE), _built(worker.log)
        left = subprocess.run(
            ["docker", "ps", "--all", "--format", f'{{{{.Label "{LABEL_RUN}"}}}}'],
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        assert [run for run in left if run.startswith(exp_id)] == []
    finally:
        _remove_images(_built(worker.log))


def test_preflight_under_docker_names_exactly_the_broken_and_vacuous_tasks(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    _dataset(
        tmp_path,
        ("own-image", "tb-own-image", "hello-file", BROKEN, VACUOUS),
        "  - {id: oracle, agent: {preset: oracle}}",
    )
    log = tmp_path / "preflight.log"
    env = {**fleet_env, "EVALFLEET_TASK_BASE_IMAGE": BASE}
    try:
        checked = run_cli("preflight", str(tmp_path / "matrix.yaml"), env=env, timeout=900)
        log.write_text(checked.stderr)
        assert checked.returncode == 2, checked.stderr
        assert problems(checked.stderr) == UNSOUND
    finally:
        builds = [d.parent for d in (tmp_path / "tasks").rglob("Dockerfile")]
        _remove_images([task_tag(context, BASE) for context in builds])


def test_preflight_says_a_preset_in_a_container_cannot_reach_the_scripted_server(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "matrix.yaml").write_text(f"""
name: preset-in-docker
runs_per_tier: 1
agent: {{preset: claude-code, sandbox: docker, docker: {{image: {BASE}}}, timeout_s: 20}}
tiers: [{{id: claude}}]
scenarios: [{{id: s, prompt: go}}]
""")
    checked = run_cli("preflight", str(tmp_path / "matrix.yaml"), env=fleet_env, timeout=300)
    assert checked.returncode == 2, checked.stderr
    assert "the scripted model server (on this machine's loopback) is unreachable" in (
        checked.stderr
    )


def test_a_task_image_that_fails_to_build_says_its_failing_step_first(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """A task whose Dockerfile fails: each run an infrastructure error whose reason
    starts with the build's last words, not with the middle of a line of its tail
    ("acy builder is deprecated")."""
    folder = tmp_path / "exp"
    task = folder / "tasks" / "breaks"
    shutil.copytree(FIXTURES / "tasks" / "own-image", task)
    dockerfile = next(task.rglob("Dockerfile"))
    dockerfile.write_text(
        f"FROM {BASE}\nRUN echo {'x' * 600} && echo the-step-that-broke >&2 && exit 7\n"
        f"# {uuid.uuid4().hex}\n"
    )
    (folder / "matrix.yaml").write_text(
        "name: breaks\nruns_per_tier: 1\n"
        f"agent: {{command: 'true', sandbox: docker, docker: {{image: {BASE}}}}}\n"
        "tiers: [{id: T0}]\nscenarios: [{task: tasks/breaks}]\n"
    )
    start_worker(concurrency=1)
    done = run_cli("submit", str(folder / "matrix.yaml"), "--wait", "--json", env=fleet_env)
    assert done.returncode == 3, done.stderr
    [run] = store.results.all(json.loads(done.stdout)["experiment"]["id"])
    first = (run.fail_reason or "").splitlines()[0]
    assert first.startswith("`docker build` failed: "), run.fail_reason
    assert "non-zero code: 7" in first or "exit code: 7" in first, run.fail_reason
