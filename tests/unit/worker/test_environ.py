"""worker.environ.inherited: what of the worker's environment an agent gets."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from core.matrix import AgentConfig
from worker.environ import inherited

WORKER = {
    "PATH": "/usr/bin:/bin", "HOME": "/home/worker", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
    "TERM": "xterm", "TZ": "UTC", "AWS_SECRET_ACCESS_KEY": "aws", "ANTHROPIC_API_KEY": "ant",
    "CI_JOB_TOKEN": "ci", "SOME_SETTING": "x", "EVALFLEET_BROKER_URL": "redis://h/0",
    "EVALFLEET_WORKDIR": "/tmp/runs",
}  # fmt: skip
KEPT = {"PATH", "HOME", "LANG", "LC_ALL", "TERM", "TZ"}


def test_an_agent_gets_the_kept_variables_and_nothing_else_of_the_worker() -> None:
    agent = AgentConfig(command="true")
    assert set(inherited(agent, WORKER)) == KEPT


def test_a_preset_gets_its_key_and_pass_env_the_variables_it_names() -> None:
    preset = AgentConfig.model_validate({"preset": "claude-code"})
    assert set(inherited(preset, WORKER)) == KEPT | {"ANTHROPIC_API_KEY"}
    passing = AgentConfig(command="true", pass_env=["SOME_SETTING", "AWS_SECRET_ACCESS_KEY"])
    assert inherited(passing, WORKER)["AWS_SECRET_ACCESS_KEY"] == "aws"
    assert set(inherited(passing, WORKER)) == KEPT | {"SOME_SETTING", "AWS_SECRET_ACCESS_KEY"}


def test_pass_env_never_names_a_worker_setting() -> None:
    with pytest.raises(ValidationError, match="EVALFLEET_\\* are the worker's settings"):
        AgentConfig(command="true", pass_env=["EVALFLEET_BROKER_URL"])
