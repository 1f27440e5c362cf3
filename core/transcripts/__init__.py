"""Agent transcripts: parse any supported format into one `Transcript`, render it for a judge.

Formats (the `agent.transcript` values): events-jsonl, claude-stream-json,
codex-exec-json, opencode-json, gemini-json, gemini-stream-json, plain, and
`auto`: the first CLI format whose parser recognises the output (the run's
`transcript_format` says which); output none recognises is unrecognised. One
module per agent CLI, which registers its format's reader and traits
(core.transcripts.formats); everything here asks that registry.

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

import importlib
import pkgutil

from core.metrics.formulas import with_cumulative_input
from core.results.transcript import LLMCallMetrics, Transcript
from core.transcripts.compact import render_transcript
from core.transcripts.events import parse_events
from core.transcripts.formats import FORMATS, AgentOutput
from core.transcripts.outage import outage_of, stated_wait_s

__all__ = ["FORMATS", "parse_transcript", "render_transcript"]

# Every module is imported, so each format module registers its format(s) in FORMATS
# (core.transcripts.formats): a new format is one new module, listed nowhere else.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


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
        raise ValueError(
            f"unknown transcript format {fmt!r}: use one of {', '.join(sorted(FORMATS))}"
        )
    events = parse_events(events_text) if events_text and events_text.strip() else None
    if events is not None and FORMATS[fmt].events_only:
        transcript = events
    else:
        transcript = FORMATS[fmt].read(AgentOutput(output, stderr, command_pattern))
        # `auto` has read it as the format that recognised it (else as its own).
        read_as = FORMATS[transcript.format]
        if session_text and read_as.session_calls is not None:
            transcript = _per_request(transcript, read_as.session_calls(session_text))
        if events is not None:
            transcript = _overlay_events(transcript, events)
    transcript.llm_calls = with_cumulative_input(transcript.llm_calls)
    if (outage := outage_of(transcript.agent_reported_error)) is not None:
        transcript.outage = outage
        transcript.retry_after_s = stated_wait_s(outage)
    return transcript


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
