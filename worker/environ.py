"""What of the worker's environment an agent gets.

Agents get an allow-list of the worker's environment (`inherited`, used by
worker.run.agent_env for every agent, its setup and its gates), never
EVALFLEET_*; but an unsandboxed agent can still read its parent's /proc/PID/environ: the
environment the worker process was started with, which taking the variable
out of os.environ does not change (the kernel shows the original block of
memory). So once the worker has read the broker's URL, fleet.procfs.forget also
overwrites the value in that block; the pool processes forked afterwards inherit
the blank.
"""

from __future__ import annotations

from collections.abc import Mapping

from core.matrix import AgentConfig

# Where programs are, whose home it is, how text is read and shown: what a CLI needs
# to start, and never a credential.
KEPT = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "LANG", "LANGUAGE", "TERM",
     "COLORTERM", "NO_COLOR", "TZ"}
)  # fmt: skip
KEPT_PREFIXES = ("LC_",)


def inherited(agent: AgentConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of the worker's `environ` an agent gets (README, "matrix.yaml"):
    KEPT and locale ones, its API key variable (`api_key_env`, which a preset fills),
    a preset's base URL variables and those the matrix names in `pass_env`. A secret of
    the job that started the worker (a CI runner's cloud credentials) reaches no agent
    unless named."""
    named = {*agent.pass_env, *([agent.api_key_env] if agent.api_key_env else [])}
    if agent.preset_spec is not None:
        named.update(agent.preset_spec.base_url_env)
    # The names first, then the values of the few kept: each of os.environ's items is
    # decoded anew on every read, and a run asks for them once per run.
    kept = [
        name
        for name in environ
        if not name.startswith("EVALFLEET_")
        and (name in KEPT or name in named or name.startswith(KEPT_PREFIXES))
    ]
    return {name: environ[name] for name in kept}
