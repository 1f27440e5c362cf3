"""`transcript: auto`: the output read as the first format that recognises it.

Formats are tried in the order matrix.yaml's schema lists them (core.matrix's
TRANSCRIPT_FORMATS), those with a recogniser only: the agent CLIs'. The run's
`transcript_format` says which one read it; output none recognises is read by the
plain fallback and marked unrecognised.
"""

from __future__ import annotations

from core.matrix import TRANSCRIPT_FORMATS
from core.results.transcript import Transcript
from core.transcripts.formats import FORMATS, AgentOutput, TranscriptFormat, register_format
from core.transcripts.plain import parse_plain

FORMAT = "auto"


def read_auto(out: AgentOutput) -> Transcript:
    for name in TRANSCRIPT_FORMATS:
        fmt = FORMATS[name]
        if fmt.recognises is not None and fmt.recognises(out.stdout):
            return fmt.read(out)
    unrecognised = parse_plain(out.stdout, out.command_pattern)
    return unrecognised.model_copy(update={"format": FORMAT, "recognised": False})


# Streaming: whichever CLI it turns out to be, its spend is watched while it runs.
register_format(TranscriptFormat(FORMAT, read_auto, streaming=True))
