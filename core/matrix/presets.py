"""`agent: {preset: NAME}`: what each real agent CLI's preset fills in, and the
transcript formats `agent.transcript` may name.

A format's reader and traits are its module's in core.transcripts, which this pure
package may not import (it is above it): here are only the names matrix.yaml
accepts, in the order its schema lists them and `transcript: auto` tries them.
`PresetName` and the `transcript` values are derived from these two tables;
tests/unit/test_extension_points.py fails when a name here has no reader, a reader
no name here, or a preset's format is not one (docs/EXTENDING.md, "An agent CLI
preset").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias


@dataclass(frozen=True)
class AgentPreset:
    """What `agent: {preset: NAME}` fills in for a real agent CLI (README, "Agent CLIs").

    The command runs the CLI non-interactively with JSON output, gives it the prompt on
    stdin from $PROMPT_FILE (opencode, which takes it only as an argument: "$PROMPT",
    one quoted word the shell never re-reads; `$(cat ...)` would drop trailing newlines),
    adds the model flag only when `model:` is set, and passes `permission_flags`, what
    an unattended run needs to edit files and run commands without asking.

    Each run of a preset gets a home of its own in its run folder (worker.workspace.own_home):
    the CLI's state, settings and sessions never reach another run or the worker's user.
    `env` is set for the CLI (what it needs to run unattended, as root, in a container),
    `home_files` are written into its fresh home, and the variables of `base_url_env`
    pass through from the worker's environment, for a gateway or the scripted model
    server.
    """

    cli: str  # the executable, looked for on PATH
    command: str  # with {permissions} where permission_flags go
    transcript: str
    permission_flags: str
    api_key_env: str | None  # the provider key the CLI reads: redacted from results
    base_url_env: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    home_files: dict[str, str] = field(default_factory=dict)
    # Where in its home the CLI records its session, for what its stdout only sums
    # (core.transcripts: each model request); a glob.
    session_files: str | None = None
    # It calls a model, so its jail keeps the network (worker.confinement.needs_network).
    calls_model: bool = True
    # It runs a benchmark task's solution, copied into its run and shown at /solution.
    runs_solution: bool = False
    # What the CLI pinned in .ci/agent-clis.json asks for when `model:` is unset (as
    # measured against a loopback server); None where it depends on the CLI's own
    # configuration, or where it routes between models by itself. It has a built-in
    # price (core.metrics.pricing).
    default_model: str | None = None
    # Without a default_model, how the CLI picks its model when `model:` is unset, in
    # words: validate and submit warn with it that the runs' cost cannot be known.
    model_choice: str | None = None


TRANSCRIPT_FORMATS = (
    "events-jsonl",
    "claude-stream-json",
    "codex-exec-json",
    "opencode-json",
    "gemini-json",
    "gemini-stream-json",
    "plain",
    "auto",
)

PRESETS: dict[str, AgentPreset] = {
    "claude-code": AgentPreset(
        cli="claude",
        command="claude -p --output-format stream-json --verbose {permissions}"
        ' ${EVALFLEET_MODEL:+--model "$EVALFLEET_MODEL"} < "$PROMPT_FILE"',
        transcript="claude-stream-json",
        session_files=".claude/projects/*/*.jsonl",
        default_model="claude-opus-5-5",
        permission_flags="--dangerously-skip-permissions",
        api_key_env="ANTHROPIC_API_KEY",
        base_url_env=("ANTHROPIC_BASE_URL",),
        env={
            # As root (containers, CI runners) Claude Code refuses
            # --dangerously-skip-permissions unless told it runs in a sandbox.
            "IS_SANDBOX": "1",
            # No update, telemetry or error report mid-experiment: the model's API only.
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        },
    ),
    "codex": AgentPreset(
        cli="codex",
        # Codex 0.169 reads no OPENAI_BASE_URL: a base URL becomes a provider of its
        # own, which also keeps Codex from trying a WebSocket the server may not have.
        command="codex exec --json --skip-git-repo-check {permissions}"
        ' ${EVALFLEET_MODEL:+--model "$EVALFLEET_MODEL"}'
        " ${OPENAI_BASE_URL:+-c model_provider=base-url -c"
        ' "model_providers.base-url={name=\\"OpenAI\\", base_url=\\"$OPENAI_BASE_URL\\",'
        ' env_key=\\"OPENAI_API_KEY\\"}"} - < "$PROMPT_FILE"',
        transcript="codex-exec-json",
        session_files=".codex/sessions/**/rollout-*.jsonl",
        default_model="gpt-6.1-sol",
        # --full-auto is gone from 0.169; exec never asks for approval.
        permission_flags="--sandbox workspace-write",
        api_key_env="OPENAI_API_KEY",
        base_url_env=("OPENAI_BASE_URL",),
    ),
    "gemini-cli": AgentPreset(
        cli="gemini",
        command="gemini --output-format stream-json {permissions}"
        ' ${EVALFLEET_MODEL:+--model "$EVALFLEET_MODEL"} < "$PROMPT_FILE"',
        transcript="gemini-stream-json",
        session_files=".gemini/tmp/*/chats/session-*.jsonl",
        # Measured: Gemini CLI 0.61 asked gemini-3.5-flash-lite, then gemini-3.1-pro-preview.
        model_choice="Gemini CLI picks a model itself for each request (the pinned one asked "
        "gemini-3.5-flash-lite, then gemini-3.1-pro-preview, in one run)",
        permission_flags="--yolo",
        api_key_env="GEMINI_API_KEY",
        base_url_env=("GOOGLE_GEMINI_BASE_URL",),
        # A workspace it has never seen is untrusted (--yolo falls back to asking), and
        # with a base URL and no chosen auth type Gemini CLI 0.61 refuses to start.
        env={"GEMINI_CLI_TRUST_WORKSPACE": "true"},
        home_files={
            ".gemini/settings.json": '{"security": {"auth": {"selectedType": "gemini-api-key"}}}\n'
        },
    ),
    "opencode": AgentPreset(
        cli="opencode",
        # Its log on stderr: the cause of an error its stdout calls only "Unexpected
        # server error" (core.transcripts.opencode). A title of its own: else OpenCode
        # asks a second model for one, a request whose tokens it reports nowhere.
        command="opencode run --format json --print-logs --log-level ERROR"
        ' --title "$EVALFLEET_RUN_ID" {permissions}'
        ' ${EVALFLEET_MODEL:+--model "$EVALFLEET_MODEL"} "$PROMPT"',
        transcript="opencode-json",
        model_choice="OpenCode picks a model itself, from the providers it finds",
        permission_flags="",
        api_key_env=None,
        base_url_env=("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"),
        env={"OPENCODE_DISABLE_AUTOUPDATE": "true"},
    ),
    # Harbor's oracle agent: the task's own solution run where an agent would run, so
    # a task whose oracle fails is broken, whatever an agent does (scheduler preflight).
    "oracle": AgentPreset(
        cli="bash",
        command="bash /solution/solve.sh",
        transcript="plain",
        permission_flags="",
        api_key_env=None,
        calls_model=False,
        runs_solution=True,
    ),
}
# Literals built from the tables exist only once the module runs: a type checker sees
# the names as text, pydantic (and `scheduler schema`) as the Literals they are.
if TYPE_CHECKING:
    PresetName: TypeAlias = str
    TranscriptFormatName: TypeAlias = str
else:
    PresetName = Literal[tuple(PRESETS)]
    TranscriptFormatName = Literal[TRANSCRIPT_FORMATS]


def preset_fields(preset: AgentPreset, permission_flags: str | None) -> dict[str, Any]:
    flags = preset.permission_flags if permission_flags is None else permission_flags
    return {
        "command": preset.command.replace(" {permissions}", f" {flags}" if flags else ""),
        "transcript": preset.transcript,
        "api_key_env": preset.api_key_env,
    }
