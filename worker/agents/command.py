"""The `command` agent: the configured bash command, run in the workspace.

Bounded like every command (core.evaluation.shell: its process group killed at the
timeout, output capped) and, per the agent's config, in its workspace size
(`max_workspace_mb`, checked while it runs and once after) and sandboxed
(`sandbox: bwrap`, worker.sandbox; `sandbox: docker`, worker.docker_sandbox,
in the container the caller started; a user of the run's own, worker.confinement).
A preset's CLI missing from the worker's PATH is said as such, before anything
runs (in a container, the image must have it). A streaming CLI's spend (its format's
`streaming` trait, core.transcripts.formats) is watched against the run's `limits`
as its stdout arrives, and the agent stopped at the line that crosses one.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping

from core.evaluation.shell import run_shell
from core.matrix import SOLUTION_DIR, AgentConfig, Limits, ModelPrice
from core.metrics.limits import crossed, spend_of
from core.results.transcript import AgentOutcome
from core.transcripts import FORMATS, parse_transcript
from worker.confinement import Confinement, isolation
from worker.docker_sandbox import Container
from worker.workspace import RunDir, size_limit


class SpendWatch:
    """A streaming CLI's stdout parsed as it arrives: the spend limit it crossed.

    Each chunk that completes a line is parsed with everything before it (the parsers
    read whole transcripts), unless the last parse was so recent that parsing again
    would take over a fifth of the time: a flood is checked less often, never
    unbounded. Beyond `max_bytes` nothing more is kept or checked here; the
    evaluation of the finished run still checks the limits.
    """

    def __init__(self, fmt: str, limits: Limits, price: ModelPrice | None, max_bytes: int):
        self.fmt, self.limits, self.price, self.max_bytes = fmt, limits, price, max_bytes
        self.text = bytearray()
        self.reason: str | None = None
        self.next_parse = 0.0

    def __call__(self, chunk: bytes) -> str | None:
        if len(self.text) >= self.max_bytes:
            return None
        self.text += chunk
        now = time.monotonic()
        if b"\n" not in chunk or now < self.next_parse:
            return None
        transcript = parse_transcript(self.fmt, self.text.decode("utf-8", "replace"))
        self.reason = crossed(self.limits, spend_of(transcript, self.price))
        self.next_parse = now + 4 * (time.monotonic() - now)
        return self.reason


# wide: the run's parts its agent needs, which a delivery and the preflight hold apart
def run_command_agent(
    agent: AgentConfig,
    run_dir: RunDir,
    env: Mapping[str, str],
    container: Container | None = None,
    limits: Limits | None = None,
    price: ModelPrice | None = None,
    confinement: Confinement | None = None,
) -> AgentOutcome:
    """Raises SetupError when the sandbox cannot be set up on this worker. `limits`:
    watched while the agent runs when its transcript streams (`price` prices it);
    `confinement`: the run's (worker.confinement)."""
    assert agent.command is not None  # the config refuses a command agent without one
    started = time.time()
    missing = agent.cli is not None and agent.sandbox != "docker"
    if missing and shutil.which(agent.cli or "", path=env.get("PATH")) is None:
        # An infrastructure error (core.evaluation.evaluate): the worker lacks the CLI.
        return AgentOutcome(
            error=f"agent CLI not found: {agent.cli} (preset {agent.preset}; not on the "
            "worker's PATH)",
            started_at=started,
            ended_at=time.time(),
        )
    if agent.sandbox == "docker":
        assert container is not None  # worker.run starts it around the agent and gates
        argv_prefix, env = container.exec_argv(), container.client_env
    else:
        c = confinement or Confinement(isolation(agent))
        # The oracle's solution (worker.workspace.with_solution) is its alone to see.
        runs_solution = agent.preset_spec is not None and agent.preset_spec.runs_solution
        argv_prefix = c.argv_prefix(
            run_dir, {SOLUTION_DIR: run_dir.solution} if runs_solution else None
        )
    over_limit = size_limit(run_dir.workspace, agent.max_workspace_mb)
    spend = None
    if limits is not None and limits != Limits() and FORMATS[agent.transcript].streaming:
        spend = SpendWatch(agent.transcript, limits, price, agent.max_transcript_bytes)
    result = run_shell(
        agent.command,
        run_dir.workspace,
        timeout_s=agent.timeout_s,
        env=env,
        max_output_bytes=agent.max_transcript_bytes,
        argv_prefix=argv_prefix,
        watch=over_limit,
        on_stdout=spend,
        user=confinement.user if confinement is not None else None,
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
        limit=spend.reason if spend is not None and stopped == spend.reason else None,
        stdout=result.stdout,
        stderr=result.stderr,
        output_truncated=result.truncated,
        started_at=started,
        ended_at=time.time(),
    )
