"""The benchmark task fixtures (tests/fixtures/tasks) are what their README says: every
task's solution passes its tests but the broken one's, and doing nothing fails every
task but the vacuous one. Each is run at the task's own paths (/app or its workdir,
/tests, /solution, /logs), as read into its scenario (core.matrix.task_folders): in a
bubblewrap sandbox for the tasks that run on this system, in Docker for those with an
image of their own (skipped where no engine answers)."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from core.matrix import Scenario
from core.matrix.task_folders import read_task
from tests.conftest import FIXTURES
from tests.support.engine import engine_missing

pytestmark = pytest.mark.integration

TASKS = FIXTURES / "tasks"
FOLDERS = sorted(p for p in TASKS.iterdir() if p.is_dir())
BROKEN, VACUOUS = "broken-oracle", "vacuous-tests"


def scenario_of(folder: Path) -> Scenario:
    return Scenario.model_validate(read_task(folder), context={"check_files": True})


def layout(scenario: Scenario, tmp_path: Path) -> dict[str, Path]:
    """The task's paths on this machine: the workspace, the tests with the verifier's
    runner beside them, the solution as a folder holding solve.sh, the logs."""
    paths = {name: tmp_path / name for name in ("app", "tests", "solution", "logs")}
    if scenario.workspace is not None:
        shutil.copytree(scenario.workspace, paths["app"])
    paths["app"].mkdir(exist_ok=True)
    assert scenario.tests is not None and scenario.verifier is not None
    shutil.copytree(scenario.tests, paths["tests"])
    if scenario.verifier.runner is not None:
        shutil.copy(scenario.verifier.runner, paths["tests"] / scenario.verifier.runner.name)
    if scenario.solution is not None and scenario.solution.is_dir():
        shutil.copytree(scenario.solution, paths["solution"])
    elif scenario.solution is not None:
        paths["solution"].mkdir()
        shutil.copy(scenario.solution, paths["solution"] / "solve.sh")
    (paths["logs"] / "verifier").mkdir(parents=True)
    return paths


def bwrap(paths: dict[str, Path], workdir: str, env: dict[str, str], command: str) -> int:
    mounts = ["--bind", str(paths["app"]), workdir, "--bind", str(paths["logs"]), "/logs"]
    for name in ("tests", "solution"):
        if paths[name].is_dir():
            mounts += ["--ro-bind", str(paths[name]), f"/{name}"]
    setenv = [arg for key, value in env.items() for arg in ("--setenv", key, value)]
    lib64 = ["--symlink", "usr/lib64", "/lib64"] if Path("/usr/lib64").is_dir() else []
    argv = [
        "bwrap", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
        "--symlink", "usr/lib", "/lib", *lib64, "--ro-bind", "/etc", "/etc",
        "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", *mounts,
        "--unshare-all", "--die-with-parent", "--chdir", workdir,
        "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", *setenv,
        "bash", "-c", command,
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, timeout=120).returncode


def docker(paths: dict[str, Path], scenario: Scenario, command: str) -> int:
    env = scenario.environment
    assert env is not None and env.build is not None
    tag = f"evalfleet-test-task-{uuid.uuid4().hex[:12]}"
    subprocess.run(["docker", "build", "-q", "-t", tag, str(env.build)], check=True, timeout=600)
    try:
        mounts = ["-v", f"{paths['logs']}:/logs"]
        for name in ("tests", "solution"):
            if paths[name].is_dir():
                mounts += ["-v", f"{paths[name]}:/{name}:ro"]
        verifier = scenario.verifier
        assert verifier is not None
        setenv = [arg for key, value in verifier.env.items() for arg in ("-e", f"{key}={value}")]
        argv = ["docker", "run", "--rm", "--network", "none", *mounts, *setenv, "-w", env.workdir]
        return subprocess.run(
            [*argv, tag, "bash", "-c", command], capture_output=True, timeout=300
        ).returncode
    finally:
        # The tag only: its untagged parents are the layer cache another test's build of
        # the same Dockerfile may be using at this moment (pruning them once failed that
        # build: "unknown parent image ID").
        subprocess.run(
            ["docker", "image", "rm", "-f", "--no-prune", tag], capture_output=True, timeout=60
        )


def verdict(scenario: Scenario, paths: dict[str, Path], exit_code: int) -> bool:
    """Whether the run passes, as the task's format reads it."""
    verifier = scenario.verifier
    assert verifier is not None
    if verifier.reward == "exit_code":
        return exit_code == 0
    logs = paths["logs"] / "verifier"
    if (logs / "reward.json").is_file():
        rewards = json.loads((logs / "reward.json").read_text())
    else:
        rewards = {"reward": float((logs / "reward.txt").read_text())}
    return all(value >= scenario.pass_reward for value in rewards.values())


def passes(folder: Path, tmp_path: Path, *, solved: bool) -> bool:
    scenario = scenario_of(folder)
    paths = layout(scenario, tmp_path)
    assert scenario.verifier is not None and scenario.environment is not None
    # The verifier's exit code counts only for exit_code rewards; the solution's never.
    command = ("bash /solution/solve.sh; " if solved else "") + scenario.verifier.command
    if scenario.environment.build is not None:
        if (reason := engine_missing()) is not None:
            pytest.skip(f"{folder.name} needs its own image: {reason}")
        code = docker(paths, scenario, command)
    else:
        if shutil.which("bwrap") is None:
            pytest.skip("no bwrap here (apt-get install bubblewrap)")
        code = bwrap(paths, scenario.environment.workdir, scenario.verifier.env, command)
    return verdict(scenario, paths, code)


def test_the_fixtures_are_enough() -> None:
    names = {f.name for f in FOLDERS}
    assert len(names) >= 10 and {BROKEN, VACUOUS} <= names
    assert sum((f / "task.yaml").is_file() for f in FOLDERS) >= 3
    readme = (TASKS / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in names), "README.md lists every task"


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.name)
def test_the_solution_passes_but_the_broken_one(folder: Path, tmp_path: Path) -> None:
    assert passes(folder, tmp_path, solved=True) is (folder.name != BROKEN)


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.name)
def test_doing_nothing_fails_but_the_vacuous_one(folder: Path, tmp_path: Path) -> None:
    assert passes(folder, tmp_path, solved=False) is (folder.name == VACUOUS)
