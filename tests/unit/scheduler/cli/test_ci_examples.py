"""The CI examples in examples/ci: valid for their CI system's schema, their shape, and
every `scheduler` command in them.

Each command is parsed by the real CLI (every option, type and argument
checked, nothing run), so the examples cannot drift from it. Their steps run as
their CI systems run them in tests/integration/test_ci_pipelines.py.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
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
_VARIABLE = re.compile(r"\$\{?(\w+)\}?")  # the shell's $NAME or ${NAME}


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
    """Every `scheduler` command, each variable the file sets given its value there
    (any other one, a word)."""
    document = yaml.safe_load(path.read_text())
    values = {**document.get("env", {}), **document.get("variables", {})}

    def value(match: re.Match[str]) -> str:
        found = values.get(match.group(1), "VALUE")
        return str(found) if isinstance(found, int | str) and "$" not in str(found) else "VALUE"

    found = []
    for text in strings(document):
        text = _VARIABLE.sub(value, _EXPRESSION.sub("VALUE", text.replace("\\\n", " ")))
        for command in _COMMAND.findall(text):
            found.append(shlex.split(command)[1:])
    return found


@pytest.mark.parametrize(
    ("path", "schema"),
    [(GITHUB, "vendor.github-workflows"), (GITLAB, "vendor.gitlab-ci")],
    ids=["github", "gitlab"],
)
def test_the_ci_examples_are_valid_for_their_ci_systems_schema(path: Path, schema: str) -> None:
    checked = subprocess.run(
        [
            str(Path(sys.executable).parent / "check-jsonschema"),
            "--builtin-schema",
            schema,
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


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


# A command substitution a shell checks: the whole value of an assignment.
_CHECKED_SUBSTITUTION = re.compile(r"^\s*\w+=\$\([^()]*\)\s*$")


def _substitutions_are_checked(script: str) -> None:
    for line in script.splitlines():
        if "$(" in line:
            assert _CHECKED_SUBSTITUTION.match(line), f"unchecked command substitution: {line}"


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
    steps = [step for job in jobs.values() for step in job["steps"]]
    scripts = [step["run"] for step in steps if "run" in step]
    # Every step fails on any failed command, unset variable or failed pipe part.
    assert all(script.startswith("set -euo pipefail\n") for script in scripts)
    for script in scripts:
        _substitutions_are_checked(script)
    # evalfleet is installed from the one pinned source, in every job.
    installs = [s for s in scripts if "pip install" in s]
    assert len(installs) == len(jobs)
    assert all('python -m pip install "$EVALFLEET_PACKAGE"' in s for s in installs)
    assert re.fullmatch(
        r"evalfleet @ git\+https://\S+@v[\d.]+", workflow["env"]["EVALFLEET_PACKAGE"]
    )
    report = [step.get("run", "") for step in jobs["report"]["steps"]]
    # The verdict-first summary goes to the job summary and, on a pull request, a comment.
    written = next(s for s in report if "--format github > summary.md" in s)
    assert 'cat summary.md >> "$GITHUB_STEP_SUMMARY"' in written
    comment = next(s for s in jobs["report"]["steps"] if "gh pr comment" in s.get("run", ""))
    assert comment["if"] == "github.event_name == 'pull_request'"
    assert "--body-file summary.md" in comment["run"]
    assert jobs["report"]["permissions"]["pull-requests"] == "write"
    # The last step gates: infrastructure errors, then a regression against the baseline.
    gate = report[-1]
    assert "--fail-on-infra-errors" in gate and "--fail-on-regression" in gate
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
    assert pipeline["default"]["before_script"] == [
        'python -m pip install --quiet "$EVALFLEET_PACKAGE"'
    ]
    lines = [line for job in ("submit", "workers", "report") for line in pipeline[job]["script"]]
    # sh has no pipefail: no line has a pipe, and a substitution is checked.
    assert not [line for line in lines if re.search(r"[^|]\|[^|]", line)]
    for line in lines:
        _substitutions_are_checked(line)
    gate = " ".join(pipeline["report"]["script"])
    assert "--fail-on-infra-errors" in gate and "--fail-on-regression" in gate
