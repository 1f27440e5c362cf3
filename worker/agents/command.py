"""The `command` agent: the configured bash command, run in the workspace.

Bounded like every command (core.shell: its process group killed at the
timeout, output capped) and, per the agent's config, in its workspace size
(`max_workspace_mb`, checked while it runs and once after) and sandboxed
(`sandbox: bwrap`, worker/sandbox.py; `sandbox: docker`, worker/docker_sandbox.py,
in the container the caller started).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from core.config import AgentConfig
from core.results import AgentOutcome
from core.shell import run_shell
from worker.docker_sandbox import Container
from worker.sandbox import sandbox_argv
from worker.workspace import RunDir, size_limit


def run_command_agent(
    agent: AgentConfig,
    run_dir: RunDir,
    env: Mapping[str, str],
    container: Container | None = None,
) -> AgentOutcome:
    """Raises SetupError when the sandbox cannot be set up on this worker."""
    assert agent.command is not None  # the config refuses a command agent without one
    if agent.sandbox == "docker":
        assert container is not None  # worker/run.py starts it around the agent and gates
        argv_prefix, env = container.exec_argv(), container.client_env
    else:
        argv_prefix = sandbox_argv(agent.sandbox, run_dir)
    over_limit = size_limit(run_dir.workspace, agent.max_workspace_mb)
    started = time.time()
    result = run_shell(
        agent.command,
        run_dir.workspace,
        timeout_s=agent.timeout_s,
        env=env,
        max_output_bytes=agent.max_transcript_bytes,
        argv_prefix=argv_prefix,
        watch=over_limit,
    )
    if container is not None:
        container.end_agent()  # its timeout, or what it left running in the background
    # A burst between two checks, or just before the exit, still counts.
    stopped = result.stopped or (over_limit() if over_limit is not None else None)
    return AgentOutcome(
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        error=result.error,
        stopped=stopped,
        stdout=result.stdout,
        stderr=result.stderr,
        output_truncated=result.truncated,
        started_at=started,
        ended_at=time.time(),
    )
