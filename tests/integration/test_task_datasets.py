"""A dataset of benchmark task folders run as one experiment through `scheduler submit`:
the fixture tasks (tests/fixtures/tasks, both formats) that run on this system, read
with one `tasks:` glob, under the default sandbox (a bwrap jail for a task).

- the oracle tier (each task's own solution) passes every sound task and fails the
  task whose solution is broken; a do-nothing tier passes only the vacuous task;
- each verifier reward (reward.txt's `reward`, reward.json's names, Terminal-Bench's
  `tests`) is in the JSON, markdown and HTML reports;
- `scheduler preflight` exits 2 naming exactly the broken and the vacuous task.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, StartWorker, run_cli
from tests.support.tasks import BROKEN, UNSOUND, VACUOUS, problems

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]

# The fixture tasks that need an image of their own run under `sandbox: docker`.
OWN_IMAGE = {"own-image", "multi-file-env", "tb-own-image"}


def _dataset(folder: Path) -> list[str]:
    """The fixture tasks that run on this system, copied under `folder`/tasks."""
    tasks = folder / "tasks"
    tasks.mkdir(parents=True)
    tasks.chmod(0o700)  # kept from other users of the machine, the run users among them
    names = []
    for task in sorted((FIXTURES / "tasks").iterdir()):
        if task.is_dir() and task.name not in OWN_IMAGE:
            shutil.copytree(task, tasks / task.name)
            names.append(task.name)
    (folder / "matrix.yaml").write_text("""
name: dataset
runs_per_tier: 1
agent: {kind: command, command: "true", timeout_s: 60}
tiers:
  - {id: oracle, agent: {preset: oracle}}
  - {id: nothing}
scenarios:
  - {tasks: "tasks/*"}
""")
    return names


def test_a_dataset_of_task_folders_runs_as_one_experiment_with_its_rewards_reported(
    fleet_env: dict[str, str], start_worker: StartWorker, tmp_path: Path
) -> None:
    names = _dataset(tmp_path)
    assert len(names) >= 8 and {BROKEN, VACUOUS} <= set(names)
    start_worker(concurrency=2)
    done = run_cli("submit", str(tmp_path / "matrix.yaml"), "--wait", "--json", env=fleet_env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    exp_id = report["experiment"]["id"]

    def passed(tier: str) -> set[str]:
        cells = report["tiers"][tier]["scenarios"]
        assert set(cells) == set(names) and all(c["counted"] == 1 for c in cells.values())
        return {name for name, cell in cells.items() if cell["passes"]}

    assert passed("oracle") == set(names) - {BROKEN}
    assert passed("nothing") == {VACUOUS}
    rewards = set(report["tiers"]["oracle"]["rewards"])
    assert {"reward", "correct", "style", "tests"} <= rewards
    assert report["tiers"]["oracle"]["scenarios"]["word-count"]["rewards"]["style"]["stats"][
        "max"
    ] == pytest.approx(1.0)

    markdown = run_cli("report", exp_id, "--format", "markdown", env=fleet_env).stdout
    html = run_cli("report", exp_id, "--format", "html", env=fleet_env).stdout
    assert "Rewards (benchmark tasks' verifiers)" in markdown
    for name in ("correct", "style", "tests"):
        assert f"| oracle | (all) | {name} |" in markdown
        assert f'<td class="label">{name}</td>' in html


def test_preflight_of_a_dataset_names_exactly_its_broken_and_vacuous_tasks(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    _dataset(tmp_path)
    checked = run_cli("preflight", str(tmp_path / "matrix.yaml"), env=fleet_env)
    assert checked.returncode == 2, checked.stderr
    assert problems(checked.stderr) == UNSOUND
