"""`scheduler validate` on a matrix of benchmark task folders, through the real CLI:
the expansion listed on its one screen (exit 0), and a malformed task refused at its
file and line by `validate` and `submit` (exit 2) with nothing queued or recorded."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from core.store import Store
from tests.conftest import FIXTURES, PREFIX, QUEUE, run_cli

pytestmark = pytest.mark.integration

MATRIX = """\
name: datasets
runs_per_tier: 2
agent: {kind: command, command: "true", timeout_s: 600}
tiers: [{id: T0}, {id: T1}]
scenarios:
  - {tasks: "fixtures/tasks/*", runs: 3}
"""


def matrix_with_tasks(folder: Path) -> Path:
    shutil.copytree(FIXTURES / "tasks", folder / "fixtures" / "tasks")
    (folder / "matrix.yaml").write_text(MATRIX, encoding="utf-8")
    return folder / "matrix.yaml"


def test_validate_lists_what_a_tasks_glob_expanded_to(
    tmp_path: Path, fleet_env: dict[str, str]
) -> None:
    result = run_cli("validate", str(matrix_with_tasks(tmp_path)), env=fleet_env, timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "2 tiers x 11 scenarios x 2 runs (11 scenarios: 3 runs) = 66 runs" in out
    assert (
        "  tasks in fixtures/tasks/: 11 scenarios (8 harbor, 3 terminal-bench); needs sandbox: "
        "docker for 3 (their own image), bwrap for 8 (they run on this system)"
    ) in out
    assert (
        "    hello-file: harbor, needs sandbox: bwrap (runs on this system); timeouts: agent "
        "120 s, verifier 30 s, reward file"
    ) in out
    assert "    ... and 6 more" in out  # the first five of eleven, compactly
    assert "own-image" in out and "builds fixtures/tasks/own-image/environment/Dockerfile" in out
    assert "scenario hello-file:" not in out  # not once more, one line per scenario
    # Under `sandbox: auto`, the tasks with an image of their own would be run on this
    # system, judged by tests of another: each such run is an infrastructure error, said.
    said = " ".join(result.stderr.split())
    assert (
        "tiers.0: tiers T0, T1 run under `sandbox: auto`, but multi-file-env, own-image, "
        "tb-own-image need their own image (`environment.image` or a Dockerfile to build): "
        "every such run would be an infrastructure error; set `sandbox: docker`"
    ) in said


def test_a_broken_task_is_refused_at_its_line_and_nothing_is_queued(
    tmp_path: Path, fleet_env: dict[str, str], store: Store
) -> None:
    matrix = matrix_with_tasks(tmp_path)
    toml = tmp_path / "fixtures" / "tasks" / "hello-file" / "task.toml"
    toml.write_text('[agent]\ntimeout_sec = 120\n[environment]\nmemory = "plenty"\n')
    before = store.redis.llen(QUEUE), store.redis.zcard(f"{PREFIX}experiments")
    for command in ("validate", "submit"):
        result = run_cli(command, str(matrix), env=fleet_env, timeout=120)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
        assert f"{toml}:4:1: environment.memory: expected a size such as" in result.stderr
    assert (store.redis.llen(QUEUE), store.redis.zcard(f"{PREFIX}experiments")) == before
    shutil.rmtree(toml.parent / "tests")
    result = run_cli("validate", str(matrix), env=fleet_env, timeout=120)
    assert result.returncode == 2
    assert f"{toml.parent}/: this task folder has no tests/test.sh" in result.stderr
