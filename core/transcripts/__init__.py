"""Agent transcripts: parse any supported format into one `Transcript`, render it for a judge.

Formats (the `agent.transcript` values): events-jsonl, claude-stream-json,
codex-exec-json, opencode-json, gemini-json, gemini-stream-json, plain, and
`auto`: the first CLI format whose parser recognises the output (the run's
`transcript_format` says which); output none recognises is unrecognised. One
module per agent CLI.

Precedence of the events file ($EVALFLEET_EVENTS), when present and not blank:
- `events-jsonl` reads ONLY that file. Without it, stdout gets the plain regex
  fallback (`structured=False`, `exit_codes_approximate=True`).
- Every other format parses stdout first; then, kind by kind, what the events file
  has wins: its tool_call events replace the commands (making them structured,
  exact), its llm_call events the calls, its components and messages likewise.
  Totals the CLI reported itself (cost, output total, duration, errors, finished)
  always come from stdout.
`cumulative_input` is set here, once, for whichever calls won.

A CLI format whose parser recognised no line of stdout, and no events file to
stand in, is `recognised=False`: the run says so rather than score an empty
session. An error the CLI reported that is the model provider's outage (rate
limit, overload, quota, authentication) is set apart as `outage` here, once for
every format (core.transcripts.outage).
"""

from __future__ import annotations

from collections.abc import Callable

from core.metrics.formulas import with_cumulative_input
from core.results.transcript import LLMCallMetrics, Transcript
from core.transcripts.claude import parse_claude, session_calls
from core.transcripts.codex import parse_codex, rollout_calls
from core.transcripts.compact import render_transcript
from core.transcripts.events import parse_events
from core.transcripts.gemini import (
    chat_calls,
    gemini_format,
    parse_gemini_json,
    parse_gemini_stream,
)
from core.transcripts.opencode import parse_opencode
from core.transcripts.outage import outage_of, stated_wait_s
from core.transcripts.plain import parse_plain

__all__ = ["FORMATS", "parse_transcript", "render_transcript"]

_STDOUT_PARSERS: dict[str, Callable[[str], Transcript]] = {
    "claude-stream-json": parse_claude,
    "codex-exec-json": parse_codex,
    "opencode-json": parse_opencode,
    "gemini-json": parse_gemini_json,
    "gemini-stream-json": parse_gemini_stream,
}
FORMATS = ("events-jsonl", *_STDOUT_PARSERS, "plain", "auto")
# A CLI's own record of its session, where its stdout tells less: each model request
# (agent.preset's session_files name where the CLI keeps it).
_SESSION_PARSERS: dict[str, Callable[[str], list[LLMCallMetrics]]] = {
    "claude-stream-json": session_calls,
    "codex-exec-json": rollout_calls,
    "gemini-stream-json": chat_calls,
}
# A CLI that states the cause of an error only in its log, printed on stderr: its
# parser reads that too (OpenCode's "Unexpected server error", core.transcripts.opencode).
_LOG_READING_PARSERS: dict[str, Callable[[str, str], Transcript]] = {
    "opencode-json": parse_opencode,
}
# Tried in this order by `auto`, then Gemini's two formats (gemini_format).
_AUTO_ORDER = ("claude-stream-json", "codex-exec-json", "opencode-json")


def parse_transcript(
    fmt: str,
    output: str,
    events_text: str | None = None,
    command_pattern: str | None = None,
    session_text: str | None = None,
    stderr: str = "",
) -> Transcript:
    """Normalize an agent's stdout (and its events file, if it wrote one) into a Transcript.

    `session_text`: the CLI's own record of its session, read for the calls stdout
    gives only summed (Codex's turns, Gemini CLI's session) or with placeholders
    (Claude Code's output counts): its requests replace them where their tokens add
    up to the run's figures (the CLI's reported totals, else its calls'), else
    stdout's stand. `stderr`: what the agent printed there, for a CLI that logs the
    cause of an error there only."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown transcript format {fmt!r}: use one of {', '.join(FORMATS)}")
    events = parse_events(events_text) if events_text and events_text.strip() else None
    if fmt == "events-jsonl":
        if events is not None:
            transcript = events
        else:
            transcript = parse_plain(output, command_pattern).model_copy(update={"format": fmt})
    else:
        if fmt == "auto":
            fmt = _detect(output)
        parse_stdout = _STDOUT_PARSERS.get(fmt)
        if (parse_with_log := _LOG_READING_PARSERS.get(fmt)) is not None:
            transcript = parse_with_log(output, stderr)
        elif parse_stdout is not None:
            transcript = parse_stdout(output)
        else:
            transcript = parse_plain(output, command_pattern)
        if fmt == "auto":
            transcript = transcript.model_copy(update={"format": fmt, "recognised": False})
        if session_text and (requests := _SESSION_PARSERS.get(fmt)) is not None:
            transcript = _per_request(transcript, requests(session_text))
        if events is not None:
            transcript = _overlay_events(transcript, events)
    transcript.llm_calls = with_cumulative_input(transcript.llm_calls)
    if (outage := outage_of(transcript.agent_reported_error)) is not None:
        transcript.outage = outage
        transcript.retry_after_s = stated_wait_s(outage)
    return transcript


def _detect(output: str) -> str:
    """The first CLI format whose parser recognises `output`; "auto" when none does."""
    found = next((f for f in _AUTO_ORDER if _STDOUT_PARSERS[f](output).recognised), None)
    return found or gemini_format(output) or "auto"


_TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def _per_request(stdout: Transcript, requests: list[LLMCallMetrics]) -> Transcript:
    """`requests` as the calls, where they add up to the run's figures: a session file
    of another session (or cut short) is not this run's."""
    figures = tuple(
        reported
        if (reported := getattr(stdout, f"reported_{kind}")) is not None
        else sum(getattr(call, kind) for call in stdout.llm_calls)
        for kind in _TOKENS
    )
    summed = tuple(sum(getattr(call, kind) for call in requests) for kind in _TOKENS)
    if not requests or summed != figures:
        return stdout
    return stdout.model_copy(update={"llm_calls": requests})


def _overlay_events(stdout: Transcript, events: Transcript) -> Transcript:
    update: dict[str, object] = {
        "events_file_malformed_lines": events.events_file_malformed_lines,
        "model": stdout.model or events.model,
    }
    if events.commands:
        update |= {"commands": events.commands, "structured": True, "exit_codes_approximate": False}
    for kind in ("llm_calls", "components", "messages"):
        if getattr(events, kind):
            update[kind] = getattr(events, kind)
            update["recognised"] = True  # the events file tells what stdout did not
    return stdout.model_copy(update=update)
