"""The `command` agent: the configured bash command, run in the workspace.

Bounded like every command (core.shell: its process group killed at the
timeout, output capped) and, per the agent's config, in its workspace size
(`max_workspace_mb`, checked while it runs and once after) and sandboxed
(`sandbox: bwrap`, worker/sandbox.py). A preset's CLI missing from the agent's
PATH is said as such, before anything runs.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping

from core.config import AgentConfig
from core.results import AgentOutcome
from core.shell import run_shell
from worker.sandbox import sandbox_argv
from worker.workspace import RunDir, size_limit


def run_command_agent(agent: AgentConfig, run_dir: RunDir, env: Mapping[str, str]) -> AgentOutcome:
    """Raises SetupError when the sandbox cannot be set up on this worker."""
    assert agent.command is not None  # the config refuses a command agent without one
    started = time.time()
    if agent.cli is not None and shutil.which(agent.cli, path=env.get("PATH")) is None:
        # An infrastructure error (core/evaluate.py): the worker lacks the CLI.
        return AgentOutcome(
            error=f"agent CLI not found: {agent.cli} (preset {agent.preset}; not on the "
            "worker's PATH)",
            started_at=started,
            ended_at=time.time(),
        )
    argv_prefix = sandbox_argv(agent.sandbox, run_dir)
    over_limit = size_limit(run_dir.workspace, agent.max_workspace_mb)
    result = run_shell(
        agent.command,
        run_dir.workspace,
        timeout_s=agent.timeout_s,
        env=env,
        max_output_bytes=agent.max_transcript_bytes,
        argv_prefix=argv_prefix,
        watch=over_limit,
    )
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
