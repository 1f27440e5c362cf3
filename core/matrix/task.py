"""A benchmark task's parts as a scenario holds them: the environment its runs happen in
and the verifier that scores them (Harbor's task.toml [environment] and [verifier],
Terminal-Bench's Dockerfile and run-tests.sh). `scenarios: [{task: DIR}]` fills them
from a task directory; a hand-written scenario may give them too.

Inside the environment the task's own paths hold, whatever the sandbox: the
workspace is `workdir` (/app), the hidden tests /tests, the solution /solution
and the verifier's output /logs/verifier (reward.txt or reward.json).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from core.matrix.fields import DirPath, FilePath, Strict

# Where a task's files are inside its environment (Harbor's container layout).
TESTS_DIR = "/tests"
SOLUTION_DIR = "/solution"
LOGS_DIR = "/logs"
VERIFIER_LOGS = "/logs/verifier"


class TaskEnvironment(Strict):
    """The image (or build context) and resources of a task's runs."""

    image: str | None = Field(None, description="a docker image (Harbor's docker_image)")
    build: DirPath | None = Field(
        None, description="a folder holding a Dockerfile, built once per worker (cached by hash)"
    )
    workdir: str = Field("/app", description="the workspace's path inside the environment")
    cpus: float | None = Field(None, gt=0, allow_inf_nan=False)
    memory_mb: int | None = Field(None, ge=64)
    allow_internet: bool = Field(
        False, description="network for the agent (the model endpoint is reached regardless)"
    )
    agent_user: str | None = Field(None, description="the user the agent runs as in the image")
    verifier_user: str | None = Field(None, description="the user the verifier runs as")

    @field_validator("workdir")
    @classmethod
    def _absolute_workdir(cls, workdir: str) -> str:
        # At the key, so that a task folder's error is at its line too.
        if not workdir.startswith("/"):
            raise ValueError(f"workdir must be an absolute path, got {workdir!r}")
        return workdir


class Verifier(Strict):
    """What scores a run once its agent has ended: a command run in the agent's
    environment with the tests at /tests, and how its verdict is read."""

    command: str = Field(description="e.g. `bash /tests/test.sh`")
    runner: FilePath | None = Field(
        None,
        description="a script put at /tests/<its name> beside the tests before the command "
        "runs: Terminal-Bench's run-tests.sh, which lives at its task's root, not in tests/; "
        "hidden from agents like the tests",
    )
    timeout_s: float = Field(120.0, gt=0, allow_inf_nan=False)
    env: dict[str, str] = Field(default_factory=dict)
    reward: Literal["file", "exit_code"] = Field(
        "file",
        description="file: /logs/verifier/reward.txt (a number) or reward.json (named "
        "numbers), as Harbor's tests write; exit_code: 1 when the command exits 0, else 0 "
        "(Terminal-Bench's runner)",
    )
