"""`scenarios:`: the tasks every tier is run on, with their workspace, prompt and checks."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from core.matrix.fields import DirPath, FileOrDirPath, FilePath, Identifier, Regex, Strict
from core.matrix.scoring import Evaluation
from core.matrix.spend import Limits
from core.matrix.task import TaskEnvironment, Verifier


class Target(Strict):
    command_pattern: Regex | None = Field(
        None, description="regex naming target-tool commands; group 1 is the subcommand"
    )
    help_pattern: Regex = r"(^|\s)(--help|-h)(\s|$)"


class ExpectedStep(Strict):
    pattern: Regex
    weight: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] = 1.0


class ProcessConfig(Strict):
    """Inputs of ProjectScylla's process metrics, matched against the run's commands."""

    expected_steps: list[ExpectedStep] = Field(default_factory=list)
    goal_patterns: list[Regex] = Field(default_factory=list)
    change_patterns: list[Regex] = Field(
        default_factory=list, description="commands that count as changes (change fail %)"
    )


class Scenario(Strict):
    id: Identifier
    description: str = ""
    workspace: DirPath | None = Field(None, description="template folder copied into each run")
    setup: list[str] = Field(default_factory=list)
    setup_timeout_s: float = Field(120.0, gt=0, allow_inf_nan=False)
    prompt: str | None = None
    prompt_file: FilePath | None = None
    target: Target = Field(default_factory=Target)
    evaluation: Evaluation = Field(default_factory=Evaluation)
    process: ProcessConfig | None = None
    queue: str | None = None
    limits: Limits | None = Field(None, description="what each run may spend")
    runs: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="runs per tier of this scenario, instead of the matrix's runs_per_tier "
        "(a fixed count, also in an adaptive matrix)",
    )
    tests: DirPath | None = Field(
        None,
        description="hidden tests (as Harbor's tests/): never readable by the agent, copied "
        "into the run once the agent has ended, at the path the gates get as $EVALFLEET_TESTS",
    )
    reference: str | None = Field(
        None,
        description="a bash command that solves the task, run by `scheduler preflight` in "
        "a prepared workspace instead of the agent: every gate must pass after it",
    )
    solution: FileOrDirPath | None = Field(
        None,
        description="the task's solution: a folder holding solve.sh (Harbor's solution/) or "
        "one script (Terminal-Bench's solution.sh, put at /solution/solve.sh); hidden from "
        "agents, at /solution for the oracle preset and the reference only",
    )
    task: DirPath | None = Field(
        None, description="the benchmark task directory this scenario was read from"
    )
    environment: TaskEnvironment | None = Field(
        None, description="the task's environment: its image and resources, its workdir"
    )
    verifier: Verifier | None = Field(
        None, description="the task's verifier, run after the agent in its environment"
    )
    pass_reward: float = Field(
        1.0,
        allow_inf_nan=False,
        description="a run passes when every reward of its verifier reaches this",
    )
    agent_timeout_s: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="the agent's time limit on this scenario (a task's), over agent.timeout_s",
    )

    @model_validator(mode="after")
    def _one_prompt(self) -> Scenario:
        if (self.prompt is None) == (self.prompt_file is None):
            raise ValueError("give exactly one of `prompt` or `prompt_file`")
        return self

    @property
    def has_image(self) -> bool:
        """A benchmark task with an image of its own (`environment.image` or a
        Dockerfile to build): only `sandbox: docker` runs it."""
        env = self.environment
        return env is not None and (env.image is not None or env.build is not None)

    def prompt_text(self) -> str:
        if self.prompt is not None:
            return self.prompt
        assert self.prompt_file is not None
        return self.prompt_file.read_text(encoding="utf-8")
