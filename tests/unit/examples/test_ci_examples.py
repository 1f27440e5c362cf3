"""The CI examples in examples/ci: their shape, and every `scheduler` command in them.

Each command is parsed by the real CLI (every option, type and argument
checked, nothing run), so the examples cannot drift from it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from scheduler.cli import main
from tests.conftest import ROOT

CI = ROOT / "examples" / "ci"
GITHUB = CI / "github-actions.yml"
GITLAB = CI / "gitlab-ci.yml"

# A command runs up to a pipe, a redirection, a `;`, `&&` or the `)` closing $(...).
_COMMAND = re.compile(r"\bscheduler\s[^|>;&)\n]*")
_EXPRESSION = re.compile(r"\$\{\{[^}]*\}\}")  # GitHub's ${{ ... }}, a value once expanded


def strings(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from strings(item)
    elif isinstance(node, str):
        yield node


def scheduler_commands(path: Path) -> list[list[str]]:
    found = []
    for text in strings(yaml.safe_load(path.read_text())):
        for command in _COMMAND.findall(_EXPRESSION.sub("VALUE", text)):
            found.append(shlex.split(command)[1:])
    return found


@pytest.mark.parametrize("path", [GITHUB, GITLAB], ids=lambda p: p.name)
def test_every_scheduler_command_in_the_ci_examples_parses(path: Path) -> None:
    commands = scheduler_commands(path)
    assert {c[0] for c in commands} >= {"submit", "worker", "report"}
    for args in commands:
        with main.make_context("scheduler", list(args)) as parent:
            name, sub, rest = main.resolve_command(parent, list(args))
            assert sub is not None, args
            try:
                sub.make_context(name or "", rest, parent=parent)
            except click.UsageError as exc:
                pytest.fail(f"{path.name}: `scheduler {shlex.join(args)}`: {exc.format_message()}")


def test_github_workflow_submits_once_then_runs_a_matrix_of_workers_until_idle() -> None:
    workflow = yaml.safe_load(GITHUB.read_text())
    assert workflow["env"]["EVALFLEET_BROKER_URL"].startswith("rediss://:${{ secrets.")
    jobs = workflow["jobs"]
    assert set(jobs) == {"submit", "workers", "report"}
    workers = jobs["workers"]
    assert workers["needs"] == "submit"
    assert len(workers["strategy"]["matrix"]["runner"]) >= 2
    assert workers["strategy"]["fail-fast"] is False
    worker_commands = [c for c in scheduler_commands(GITHUB) if c[0] == "worker"]
    assert worker_commands and all("--until-idle" in c for c in worker_commands)
    assert "always()" in jobs["report"]["if"]
    # The verdict-first summary goes to the job summary and, on a pull request, a comment.
    steps = [step.get("run", "") for step in jobs["report"]["steps"]]
    summary = next(s for s in steps if "--format github" in s)
    assert summary.endswith("> summary.md")
    assert any(s.strip() == 'cat summary.md >> "$GITHUB_STEP_SUMMARY"' for s in steps)
    comment = next(s for s in jobs["report"]["steps"] if "gh pr comment" in s.get("run", ""))
    assert comment["if"] == "github.event_name == 'pull_request'"
    assert "--body-file summary.md" in comment["run"]
    assert jobs["report"]["permissions"]["pull-requests"] == "write"
    assert "pull_request" in workflow[True]  # yaml 1.1 reads the key `on` as True


def test_gitlab_pipeline_submits_once_then_runs_parallel_workers_until_idle() -> None:
    pipeline = yaml.safe_load(GITLAB.read_text())
    assert pipeline["variables"]["EVALFLEET_BROKER_URL"].startswith("rediss://:${")
    assert pipeline["stages"] == ["submit", "run", "report"]
    assert pipeline["workers"]["parallel"] >= 2
    assert pipeline["workers"]["needs"] == ["submit"]
    assert pipeline["submit"]["artifacts"]["reports"]["dotenv"] == "experiment.env"
    assert pipeline["report"]["when"] == "always"
    worker_commands = [c for c in scheduler_commands(GITLAB) if c[0] == "worker"]
    assert worker_commands and all("--until-idle" in c for c in worker_commands)
