"""The CI examples of examples/ci run as their CI systems run them, in a repository of
the user's own: each `run:` step of the GitHub workflow as its runner does (`bash -e
{0}`, GitHub's default shell), each GitLab job's lines with `sh -e` (the runner stops
at the first that fails), job after job with what each passes on (step outputs, the
dotenv artifact). Each pipeline passes on the example and fails on a broken matrix,
on infrastructure errors and on a regression against the stored baseline.

What a test cannot have is stood in for: the broker is the test's Redis without TLS
(over the examples' rediss:// URL), a worker leaves after 3 idle seconds (not 120),
`python -m pip install "$EVALFLEET_PACKAGE"` is recorded, not run (evalfleet is
installed here already), and steps that `uses:` an action are left out. The steps'
`scheduler` is the console script forked from the tests' prestarted one, as every
command of the tests is (tests.support.prestarted; EVALFLEET_TEST_EXEC=1: exec'd).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import EXAMPLES, ROOT, scheduler_folder

pytestmark = pytest.mark.integration

CI = ROOT / "examples" / "ci"
WORKERS = 2  # worker jobs run of the examples' fleet: two, side by side
STAND_INS = {"UNTIL_IDLE": "3"}


@dataclass
class Pipeline:
    """What ran: each job's result, and the steps' output, in order."""

    results: dict[str, str] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(result in ("success", "skipped") for result in self.results.values())

    def text(self) -> str:
        return "\n".join(self.log)


@pytest.fixture
def runner(tmp_path: Path, fleet_env: dict[str, str]) -> dict[str, str]:
    """The runner's environment: the test's broker, and a `python` that records pip
    installs (every other command is the real one)."""
    shims = tmp_path / "shims"
    shims.mkdir()
    installs = tmp_path / "installs.txt"
    python = shims / "python"
    python.write_text(f'#!/bin/sh\necho "$*" >> {installs}\n[ "$1 $2 $3" = "-m pip install" ]\n')
    python.chmod(0o755)
    scheduler = scheduler_folder(tmp_path / "scheduler")
    path = os.pathsep.join([str(shims), str(scheduler), fleet_env["PATH"]])
    return {**fleet_env, "PATH": path, "INSTALLS": str(installs)}


def _repository(folder: Path, matrix: str | None = None, baseline: Path | None = None) -> Path:
    """A user's repository with the example as evalfleet/ (its matrix replaced by
    `matrix` if given) and the stored baseline."""
    repo = folder / "repo"
    shutil.copytree(EXAMPLES, repo / "evalfleet", ignore=shutil.ignore_patterns("ci", "docker"))
    if matrix is not None:
        (repo / "evalfleet" / "matrix.yaml").write_text(matrix)
    if baseline is not None:
        shutil.copy(baseline, repo / "evalfleet" / "baseline.json")
    return repo


def _broker(env: Mapping[str, str], runner: Mapping[str, str]) -> dict[str, str]:
    """`env` as the runner sees it, with what the test stands in for."""
    return {**env, **STAND_INS, "EVALFLEET_BROKER_URL": runner["EVALFLEET_BROKER_URL"]}


# --- GitHub Actions ---------------------------------------------------------------------------

_EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def _github_value(expression: str, context: Mapping[str, Any]) -> Any:
    """A GitHub expression of the kinds the workflow has: a context path, a 'literal',
    `a || b`, `a && b`, `a == b`, `always()`."""
    if "||" in expression:
        return next(
            (v for part in expression.split("||") if (v := _github_value(part.strip(), context))),
            "",
        )
    if "&&" in expression:
        return all(_github_value(part.strip(), context) for part in expression.split("&&"))
    if "==" in expression:
        left, right = (_github_value(p.strip(), context) for p in expression.split("=="))
        return left == right
    if expression == "always()":
        return True
    if expression.startswith("'"):
        return expression.strip("'")
    value: Any = context
    for part in expression.split("."):
        value = value.get(part, "") if isinstance(value, dict) else ""
    return value


def _github_text(text: str, context: Mapping[str, Any]) -> str:
    return _EXPRESSION.sub(lambda m: str(_github_value(m.group(1), context)), str(text))


def _github_condition(condition: str | None, context: Mapping[str, Any], ok: bool) -> bool:
    """A job's or step's `if`: without one, it runs when all before it succeeded."""
    if condition is None:
        return ok
    condition = _EXPRESSION.sub(lambda m: m.group(1), condition)
    return bool(_github_value(condition, context)) and (ok or "always()" in condition)


def run_github(workflow_file: Path, repo: Path, runner: dict[str, str], work: Path) -> Pipeline:
    workflow = yaml.safe_load(workflow_file.read_text())
    pipeline = Pipeline()
    context: dict[str, Any] = {
        "secrets": {},
        "inputs": {},
        "github": {"event_name": "push", "run_id": "7", "token": ""},
        "needs": {},
    }
    workflow_env = {k: _github_text(v, context) for k, v in workflow["env"].items()}
    for name, job in workflow["jobs"].items():
        needs = job.get("needs", [])
        needs = [needs] if isinstance(needs, str) else needs
        context["needs"] = {n: context["jobs"][n] for n in needs} if needs else {}
        ok = all(context["jobs"][n]["result"] == "success" for n in needs)
        if not _github_condition(job.get("if"), context, ok):
            pipeline.results[name] = "skipped"
            context.setdefault("jobs", {})[name] = {"result": "skipped", "outputs": {}}
            continue
        runners = job.get("strategy", {}).get("matrix", {}).get("runner", [None])[:WORKERS]
        jobs = [
            _GithubJob(name, job, {**context, "matrix": {"runner": r}}, workflow_env, work)
            for r in runners
        ]
        for each in jobs:
            each.start(repo, runner, pipeline)
        results = [each.finish(pipeline) for each in jobs]
        result = "success" if all(r == "success" for r in results) else "failure"
        outputs = {k: _github_text(v, jobs[0].context) for k, v in job.get("outputs", {}).items()}
        context.setdefault("jobs", {})[name] = {"result": result, "outputs": outputs}
        pipeline.results[name] = result
    return pipeline


class _GithubJob:
    """One job on a runner of its own: its steps one after the other (a job of several
    worker steps would run them in turn; the workflow's workers job has one)."""

    def __init__(
        self,
        name: str,
        job: dict[str, Any],
        context: dict[str, Any],
        workflow_env: Mapping[str, str],
        work: Path,
    ):
        self.name, self.job, self.context = name, job, {**context, "steps": {}}
        self.workflow_env = workflow_env
        runner_id = context["matrix"]["runner"]
        self.folder = work / f"{name}-{runner_id}" if runner_id else work / name
        self.folder.mkdir(parents=True)
        self.summary = self.folder / "step-summary.md"
        self.steps = list(job["steps"])
        self.ok = True
        self.background: subprocess.Popen[str] | None = None

    def start(self, repo: Path, runner: dict[str, str], pipeline: Pipeline) -> None:
        """Its steps up to the first long-running one (a worker), which is left running
        so that the matrix's jobs run side by side."""
        checkout = any(step.get("uses", "").startswith("actions/checkout") for step in self.steps)
        self.cwd = self.folder / "workspace"
        if checkout:
            shutil.copytree(repo, self.cwd)
        else:
            self.cwd.mkdir()
        self.runner = runner
        while self.steps:
            step = self.steps[0]
            if "exec scheduler worker" in step.get("run", "") and self.ok:
                self.background = self._popen(step)
                self.steps.pop(0)
                return
            self._step(self.steps.pop(0), pipeline)

    def finish(self, pipeline: Pipeline) -> str:
        if self.background is not None:
            self.background.wait(timeout=600)
            out = (self.folder / "worker.log").read_text()
            pipeline.log.append(f"[{self.name}] worker exit {self.background.returncode}\n{out}")
            self.ok = self.ok and self.background.returncode == 0
        for step in self.steps:
            self._step(step, pipeline)
        pipeline.files[self.name] = self.cwd
        pipeline.files[f"{self.name}-summary"] = self.summary
        return "success" if self.ok else "failure"

    def _env(self, step: dict[str, Any], output: Path) -> dict[str, str]:
        job_env = {k: _github_text(v, self.context) for k, v in self.job.get("env", {}).items()}
        step_env = {k: _github_text(v, self.context) for k, v in step.get("env", {}).items()}
        return _broker(
            {
                **self.runner,
                **self.workflow_env,
                **job_env,
                **step_env,
                "GITHUB_OUTPUT": str(output),
                "GITHUB_STEP_SUMMARY": str(self.summary),
            },
            self.runner,
        )

    def _script(self, step: dict[str, Any]) -> tuple[Path, Path]:
        index = len(list(self.folder.glob("step-*.sh")))
        script = self.folder / f"step-{index}.sh"
        script.write_text(_github_text(step["run"], self.context))
        return script, self.folder / f"output-{index}.txt"

    def _popen(self, step: dict[str, Any]) -> subprocess.Popen[str]:
        """A step left running, its output to a file (a pipe nobody reads would fill up
        and stop it, and with it the other jobs' wait for the queues to drain)."""
        script, output = self._script(step)
        with (self.folder / "worker.log").open("w") as log:
            return subprocess.Popen(
                ["bash", "-e", str(script)],
                cwd=self.cwd,
                env=self._env(step, output),
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )

    def _step(self, step: dict[str, Any], pipeline: Pipeline) -> None:
        if "run" not in step or not _github_condition(step.get("if"), self.context, self.ok):
            return
        script, output = self._script(step)
        done = subprocess.run(
            ["bash", "-e", str(script)],
            cwd=self.cwd,
            env=self._env(step, output),
            capture_output=True,
            text=True,
            timeout=600,
        )
        name = step.get("name", step["run"].splitlines()[-1])
        pipeline.log.append(
            f"[{self.name}] {name}: exit {done.returncode}\n{done.stdout}{done.stderr}"
        )
        self.ok = self.ok and done.returncode == 0
        if "id" in step:
            lines = output.read_text().splitlines() if output.exists() else []
            outputs = dict(line.split("=", 1) for line in lines if "=" in line)
            self.context["steps"][step["id"]] = {"outputs": outputs}


# --- GitLab CI --------------------------------------------------------------------------------


def run_gitlab(pipeline_file: Path, repo: Path, runner: dict[str, str], work: Path) -> Pipeline:
    document = yaml.safe_load(pipeline_file.read_text())
    pipeline = Pipeline()
    variables = {k: str(v) for k, v in document["variables"].items()}
    dotenv: dict[str, str] = {}
    jobs = {k: v for k, v in document.items() if isinstance(v, dict) and "stage" in v}
    for stage in document["stages"]:
        for name, job in jobs.items():
            if job["stage"] != stage:
                continue
            failed_before = not all(r == "success" for r in pipeline.results.values())
            if failed_before and job.get("when") != "always":
                pipeline.results[name] = "skipped"
                continue
            copies = min(job.get("parallel", 1), WORKERS)
            running = []
            for index in range(copies):
                folder = work / f"{name}-{index}"
                cwd = folder / "workspace"
                if job.get("variables", {}).get("GIT_STRATEGY") == "none":
                    cwd.mkdir(parents=True)
                else:
                    shutil.copytree(repo, cwd)
                lines = [*document["default"]["before_script"], *job["script"]]
                script = folder / "script.sh"
                script.write_text("\n".join(lines) + "\n")
                env = {
                    **runner,
                    **variables,
                    **{k: str(v) for k, v in job.get("variables", {}).items()},
                    **dotenv,
                    "CI_JOB_ID": f"{name}{index}",
                }
                # Output to a file: the jobs run side by side (see _GithubJob._popen).
                with (folder / "job.log").open("w") as log:
                    process = subprocess.Popen(
                        ["sh", "-e", str(script)],
                        cwd=cwd,
                        env=_broker(env, runner),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        text=True,
                    )
                running.append((cwd, process))
            codes = []
            for cwd, process in running:
                process.wait(timeout=600)
                out = (cwd.parent / "job.log").read_text()
                pipeline.log.append(f"[{name}] exit {process.returncode}\n{out}")
                codes.append(process.returncode)
                pipeline.files[name] = cwd
            pipeline.results[name] = "success" if not any(codes) else "failure"
            report = job.get("artifacts", {}).get("reports", {}).get("dotenv")
            if report and (running[0][0] / report).exists():
                lines = (running[0][0] / report).read_text().splitlines()
                dotenv.update(line.split("=", 1) for line in lines if "=" in line)
    return pipeline


# --- the pipelines ----------------------------------------------------------------------------

SYSTEMS = {
    "github": (CI / "github-actions.yml", run_github),
    "gitlab": (CI / "gitlab-ci.yml", run_gitlab),
}


def _run(system: str, repo: Path, runner: dict[str, str], work: Path) -> Pipeline:
    path, run = SYSTEMS[system]
    return run(path, repo, runner, work)


def _report(pipeline: Pipeline) -> dict[str, Any]:
    return json.loads((pipeline.files["report"] / "report.json").read_text())


@pytest.mark.parametrize("system", SYSTEMS)
def test_the_pipeline_passes_on_the_example_and_fails_on_a_regression_against_it(
    system: str, runner: dict[str, str], tmp_path: Path
) -> None:
    example = _run(system, _repository(tmp_path / "a"), runner, tmp_path / "a" / "work")
    assert example.passed, example.text()
    assert "no baseline at evalfleet/baseline.json" in example.text()
    report = _report(example)
    assert report["experiment"]["completed_runs"] == 30 and report["experiment"]["errors"] == 0
    installs = Path(runner["INSTALLS"]).read_text().splitlines()
    assert set(installs) == {
        "-m pip install evalfleet @ git+https://github.com/YOUR-ORG/evalfleet@v0.1.0"
        if system == "github"
        else "-m pip install --quiet evalfleet @ git+https://github.com/YOUR-ORG/evalfleet@v0.1.0"
    }
    if system == "github":
        summary = example.files["report-summary"].read_text()
        assert summary.startswith("**✅ Against baseline T0: ") and "| T2 |" in summary

    # The same matrix with an agent that does nothing: every gate fails, no run is an
    # infrastructure error, and the tiers that passed before are significantly worse.
    broken = (EXAMPLES / "matrix.yaml").read_text()
    broken = re.sub(r"(?m)^  command: .*$", "  command: 'true'", broken, count=1)
    baseline = tmp_path / "baseline.json"
    shutil.copy(example.files["report"] / "report.json", baseline)
    worse = _run(
        system, _repository(tmp_path / "b", broken, baseline), runner, tmp_path / "b" / "work"
    )
    assert not worse.passed, worse.text()
    assert worse.results["report"] == "failure"
    assert _report(worse)["experiment"]["errors"] == 0
    assert "significantly worse in" in worse.text()


@pytest.mark.parametrize("system", SYSTEMS)
def test_the_pipeline_fails_on_a_broken_matrix(
    system: str, runner: dict[str, str], tmp_path: Path
) -> None:
    broken = (EXAMPLES / "matrix.yaml").read_text().replace("runs_per_tier:", "runs_per_teir:")
    pipeline = _run(system, _repository(tmp_path, broken), runner, tmp_path / "work")
    assert not pipeline.passed
    assert pipeline.results["submit"] == "failure"
    assert "did you mean `runs_per_tier`?" in pipeline.text()
    # No worker waited on an experiment that was never sent.
    assert pipeline.results["workers"] == "skipped"


@pytest.mark.parametrize("system", SYSTEMS)
def test_the_pipeline_fails_on_infrastructure_errors(
    system: str, runner: dict[str, str], tmp_path: Path
) -> None:
    missing = (EXAMPLES / "matrix.yaml").read_text()
    missing = re.sub(r"(?m)^  command: .*$", "  command: ./no-such-agent", missing, count=1)
    pipeline = _run(system, _repository(tmp_path, missing), runner, tmp_path / "work")
    assert not pipeline.passed
    assert pipeline.results["report"] == "failure"
    assert "infrastructure errors, kept out of the statistics" in pipeline.text()
    # The report was written before the gate failed the job.
    assert _report(pipeline)["experiment"]["errors"] > 0
