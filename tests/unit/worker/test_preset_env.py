"""A preset's CLI runs in a home of its own with the variables it needs to run
unattended (as root too), and gets its provider's base URL from the worker."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from core.evaluation.shell import run_shell
from core.matrix import Matrix
from core.results.run import RunSpec
from worker.run import agent_env
from worker.sandbox import bwrap_argv
from worker.workspace import RunDir

SPEC = RunSpec(experiment_id="e", run_id="e:T:s:0", tier="T", scenario="s", run_index=0)


def env_for(agent: dict[str, Any], tmp_path: Path) -> tuple[dict[str, str], RunDir]:
    matrix = Matrix.model_validate(
        {"name": "x", "agent": agent, "tiers": [{"id": "T"}],
         "scenarios": [{"id": "s", "prompt": "go"}]},
        context={"check_files": False},
    )  # fmt: skip
    run_dir = RunDir(tmp_path / "run")
    run_dir.workspace.mkdir(parents=True)
    return agent_env(SPEC, matrix, run_dir, "go"), run_dir


@pytest.fixture(autouse=True)
def worker_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "worker-home"))
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://gateway.internal")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://other.internal/v1")
    monkeypatch.delenv("IS_SANDBOX", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)


def test_claude_code_runs_as_root_in_its_own_home(tmp_path: Path) -> None:
    env, run_dir = env_for({"preset": "claude-code"}, tmp_path)
    # Without it Claude Code refuses --dangerously-skip-permissions as root.
    assert env["IS_SANDBOX"] == "1"
    assert env["HOME"] == str(run_dir.home) and run_dir.home.is_dir()
    assert env["XDG_CONFIG_HOME"] == str(run_dir.home / ".config")
    assert Path(env["XDG_CACHE_HOME"]).is_dir()
    # Its own temporary folder, and the home not under it (Codex's sandbox needs that).
    assert Path(env["TMPDIR"]).is_dir() and not run_dir.home.is_relative_to(env["TMPDIR"])
    # Beside the workspace, not in it: the CLI's state is not the agent's work.
    assert not run_dir.home.is_relative_to(run_dir.workspace)
    # Its provider's base URL passes through from the worker; another provider's does not.
    assert env["ANTHROPIC_BASE_URL"] == "http://gateway.internal"
    assert "OPENAI_BASE_URL" not in env


def test_gemini_cli_gets_its_settings_file_in_its_fresh_home(tmp_path: Path) -> None:
    env, run_dir = env_for({"preset": "gemini-cli"}, tmp_path)
    settings = json.loads((run_dir.home / ".gemini" / "settings.json").read_text())
    assert settings["security"]["auth"]["selectedType"] == "gemini-api-key"
    assert env["GEMINI_CLI_TRUST_WORKSPACE"] == "true"


def test_the_matrix_env_still_wins_over_the_preset(tmp_path: Path) -> None:
    agent = {"preset": "claude-code", "env": {"IS_SANDBOX": "0", "HOME": "/srv/claude-home"}}
    env, _ = env_for(agent, tmp_path)
    assert (env["IS_SANDBOX"], env["HOME"]) == ("0", "/srv/claude-home")


def test_a_command_agent_gets_a_home_of_its_own_and_no_base_url(tmp_path: Path) -> None:
    env, run_dir = env_for({"command": "my-agent"}, tmp_path)
    assert env["HOME"] == str(run_dir.home) != str(tmp_path / "worker-home")
    assert run_dir.home.is_dir() and env["TMPDIR"] == str(run_dir.home / ".tmp")
    assert Path(env["TMPDIR"]).is_dir()
    # Its XDG folders are named in its home, and left to it to make (a preset's are made).
    assert env["XDG_CONFIG_HOME"] == str(run_dir.home / ".config")
    assert not Path(env["XDG_CONFIG_HOME"]).exists()
    assert "ANTHROPIC_BASE_URL" not in env and "IS_SANDBOX" not in env


@pytest.mark.parametrize("base_url", ["", "http://127.0.0.1:8700/v1"])
def test_codex_is_given_openai_base_url_as_a_provider_of_its_own(
    base_url: str, tmp_path: Path
) -> None:
    # Codex 0.169 ignores OPENAI_BASE_URL; the preset's command turns it into `-c`s.
    command = Matrix.model_validate(
        {"name": "x", "agent": {"preset": "codex"}, "tiers": [{"id": "T"}],
         "scenarios": [{"id": "s", "prompt": "go"}]},
        context={"check_files": False},
    ).agent.command  # fmt: skip
    assert command is not None
    (tmp_path / "prompt").write_text("go")
    shown = subprocess.run(
        ["bash", "-c", f"codex() {{ printf '%s\\n' \"$@\"; }}; {command}"],
        env={"OPENAI_BASE_URL": base_url, "PROMPT_FILE": str(tmp_path / "prompt"),
             "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    assert shown[:6] == ["exec", "--json", "--skip-git-repo-check", "--sandbox",
                         "workspace-write", *(["-c"] if base_url else ["-"])]  # fmt: skip
    if base_url:
        assert shown[6:] == [
            "model_provider=base-url",
            "-c",
            'model_providers.base-url={name="OpenAI", base_url="http://127.0.0.1:8700/v1",'
            ' env_key="OPENAI_API_KEY"}',
            "-",
        ]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_under_bwrap_a_presets_own_home_is_writable_and_the_rest_is_not(tmp_path: Path) -> None:
    env, run_dir = env_for({"preset": "claude-code", "sandbox": "bwrap"}, tmp_path)
    # Beside the home (in the jail's own /tmp when the run is under /tmp) nothing lasts.
    script = 'echo state > "$HOME/.state" && { touch "$HOME/../outside" 2>/dev/null; true; }'
    ran = run_shell(script, run_dir.workspace, timeout_s=30, env=env,
                    argv_prefix=bwrap_argv(run_dir, None))  # fmt: skip
    assert ran.ok, ran.stderr
    assert (run_dir.home / ".state").read_text() == "state\n"
    assert not (run_dir.root / "outside").exists()
