"""The readable transcript a judge reads (stdout plus a rendering of its events).

For the agent-CLI JSON formats (their `json_stream` trait, core.transcripts.formats)
the stdout IS the event stream: its JSON lines are shown through the rendering
(messages, commands with exit codes) rather than raw, and only the lines that are
not JSON (interleaved stderr, warnings) are kept as "agent output". For
`events-jsonl` and `plain` the stdout is shown as printed.
"""

from __future__ import annotations

from core.results.transcript import CommandRecord, Transcript
from core.transcripts.formats import FORMATS
from core.transcripts.jsonlines import read_json_lines

_CUT_MARKER = "\n\n[... {} characters cut ...]\n\n"


def render_transcript(transcript: Transcript, output: str, max_chars: int) -> str:
    sections: list[str] = []
    shown_output = output
    if FORMATS[transcript.format].json_stream:
        shown_output = "\n".join(read_json_lines(output).other_lines)
    if shown_output.strip():
        sections.append("## Agent output\n" + shown_output.strip("\n"))
    if transcript.structured and transcript.commands:
        sections.append("## Commands\n" + "\n".join(map(_command_line, transcript.commands)))
    if transcript.messages:
        sections.append("## Messages\n" + "\n".join(transcript.messages))
    notes = []
    if transcript.agent_reported_error:
        notes.append(f"The agent reported an error: {transcript.agent_reported_error}")
    if not transcript.finished:
        notes.append("The output ends before the agent's final event (killed or crashed).")
    if notes:
        sections.append("## Notes\n" + "\n".join(notes))
    return bound_text("\n\n".join(sections), max_chars)


def bound_text(text: str, max_chars: int) -> str:
    """`text` if it fits; else its head and tail around a marker naming how much was cut.

    The result never exceeds `max_chars` (a budget too small for the marker keeps
    just the head).
    """
    if len(text) <= max_chars:
        return text
    keep = max_chars - len(_CUT_MARKER.format(len(text)))
    if keep <= 0:
        return text[:max_chars]
    head = keep // 2
    tail = keep - head
    return text[:head] + _CUT_MARKER.format(len(text) - keep) + text[len(text) - tail :]


def _command_line(command: CommandRecord) -> str:
    status = "exit unknown" if command.exit_code is None else f"exit {command.exit_code}"
    return f"$ {command.command}  [{status}]"
