"""A transcript format: how a run's output in it is read, and its traits.

Each module of core.transcripts that reads a format registers it at its end
(`register_format`), and the package imports every one of its modules: a new format
is one new module. Everything that once listed the formats by hand asks this
registry instead: `parse_transcript` (the reader, the session reader, events-only),
`transcript: auto` (who recognises the output), the judge's rendering
(core.transcripts.compact: a JSON stream shown rendered) and the worker (which
formats stream, worker.agents.command). The names matrix.yaml accepts are
core.matrix's TRANSCRIPT_FORMATS (core.matrix may not import this package: it is
below it); tests/unit/test_extension_points.py fails when the two differ, or a
preset's session files have no reader (docs/EXTENDING.md, "An agent CLI preset").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from core.registry import Registry
from core.results.transcript import LLMCallMetrics, Transcript


@dataclass(frozen=True)
class AgentOutput:
    """What a run's agent printed, as a format's reader gets it."""

    stdout: str
    stderr: str = ""  # read by a CLI that logs the cause of an error there only
    command_pattern: str | None = None  # the target's, for the plain fallback


@dataclass(frozen=True)
class TranscriptFormat:
    name: str  # `agent.transcript` in matrix.yaml
    read: Callable[[AgentOutput], Transcript]
    # Its stdout is a stream of events while the agent runs, so the run's spend is
    # watched as it arrives (worker.agents.command).
    streaming: bool = False
    # Its stdout IS the event stream: a judge sees it rendered (messages, commands),
    # its JSON lines not raw (core.transcripts.compact).
    json_stream: bool = False
    # The calls in the CLI's own record of its session, for what its stdout gives only
    # summed (the file is the preset's `session_files`, read by the worker).
    session_calls: Callable[[str], list[LLMCallMetrics]] | None = None
    # Whether stdout is in this format, for `transcript: auto` (None: never chosen).
    recognises: Callable[[str], bool] | None = None
    # The events file, when the agent wrote one, is the whole transcript; in every other
    # format what it has wins over stdout's kind by kind (core.transcripts).
    events_only: bool = False


FORMATS: Registry[TranscriptFormat] = Registry("transcript format")


def register_format(fmt: TranscriptFormat) -> TranscriptFormat:
    return FORMATS.add(fmt.name, fmt)
