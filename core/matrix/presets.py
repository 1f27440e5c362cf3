"""`agent: {preset: NAME}`: what each real agent CLI's preset fills in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class AgentPreset:
    """What `agent: {preset: NAME}` fills in for a real agent CLI (README, "Agent CLIs").

    The command runs the CLI non-interactively with JSON output, gives it the prompt on
    stdin from $PROMPT_FILE (opencode, which takes it only as an argument: "$PROMPT",
    one quoted word the shell never re-reads; `$(cat ...)` would drop trailing newlines),
    adds the model flag only when `model:` is set, and passes `permission_flags`, what
    an unattended run needs to edit files and run commands without asking.
    """

    cli: str  # the executable, looked for on PATH
    command: str  # with {permissions} where permission_flags go
    transcript: str
    permission_flags: str
    api_key_env: str | None  # the provider key the CLI reads: redacted from results


PRESETS: dict[str, AgentPreset] = {
    "claude-code": AgentPreset(
        cli="claude",
        command="claude -p --output-format stream-json --verbose {permissions}"
        ' ${EVALFLEET_MODEL:+--model "$EVALFLEET_MODEL"} < "$PROMPT_FILE"',
        transcript="claude-stream-json",
        permission_flags="--dangerously-skip-permissions",
        api_key_env="ANTHROPIC_API_KEY",
    ),
    "codex": AgentPreset(
        cli="codex",
        command="codex exec --json --skip-git-repo-check {permissions}"
        ' ${EVALFLEET_MODEL:+--model "$EVALFLEET_MODEL"} - < "$PROMPT_FILE"',
        transcript="codex-exec-json",
        permission_flags="--full-auto",
        api_key_env="OPENAI_API_KEY",
    ),
    "gemini-cli": AgentPreset(
        cli="gemini",
        command="gemini --output-format stream-json {permissions}"
        ' ${EVALFLEET_MODEL:+--model "$EVALFLEET_MODEL"} < "$PROMPT_FILE"',
        transcript="gemini-stream-json",
        permission_flags="--yolo",
        api_key_env="GEMINI_API_KEY",
    ),
    "opencode": AgentPreset(
        cli="opencode",
        command="opencode run --format json {permissions}"
        ' ${EVALFLEET_MODEL:+--model "$EVALFLEET_MODEL"} "$PROMPT"',
        transcript="opencode-json",
        permission_flags="",
        api_key_env=None,
    ),
}
PresetName = Literal["claude-code", "codex", "gemini-cli", "opencode"]


def preset_fields(preset: AgentPreset, permission_flags: str | None) -> dict[str, Any]:
    flags = preset.permission_flags if permission_flags is None else permission_flags
    return {
        "command": preset.command.replace(" {permissions}", f" {flags}" if flags else ""),
        "transcript": preset.transcript,
        "api_key_env": preset.api_key_env,
    }
