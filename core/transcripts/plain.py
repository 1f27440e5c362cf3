"""The regex fallback over plain stdout (llm-tool-test's evaluation layers, "Transcript fallback").

Every line matching the target's `command_pattern` (re.search) is a command; its text
runs from the match to the end of the line, so shell prompts such as `$ ` drop off.
Without a pattern no command can be identified and the list stays empty.

Exit codes are guessed from the lines after a command, up to the next command line
(at most `_LOOKAHEAD` lines): an explicit "exit code N" / "exit status N" /
"exited with code N" gives N; otherwise a line starting with "error"/"fatal", a
"command not found", or a Python traceback gives 1; otherwise 0. The result is
marked `structured=False, exit_codes_approximate=True`.
"""

from __future__ import annotations

import re

from core.results.transcript import CommandRecord, Transcript
from core.transcripts.formats import TranscriptFormat, register_format

FORMAT = "plain"
_LOOKAHEAD = 20
_EXPLICIT_EXIT = re.compile(r"(?i)\bexit(?:ed with)?\s+(?:code|status)\s*[:=]?\s*(\d+)")
_ERROR_MARKER = re.compile(
    r"(?i)^\s*(?:error|fatal)\b|command not found|^Traceback \(most recent call last\)"
)


def parse_plain(output: str, command_pattern: str | None) -> Transcript:
    commands: list[CommandRecord] = []
    if command_pattern is not None:
        pattern = re.compile(command_pattern)
        lines = output.splitlines()
        starts = [
            (index, match.start())
            for index, line in enumerate(lines)
            if (match := pattern.search(line))
        ]
        ends = [index for index, _ in starts[1:]] + [len(lines)]  # one too many when empty
        for (index, column), end in zip(starts, ends, strict=False):
            after = lines[index + 1 : min(end, index + 1 + _LOOKAHEAD)]
            commands.append(
                CommandRecord(command=lines[index][column:].strip(), exit_code=_guess_exit(after))
            )
    return Transcript(
        format=FORMAT, commands=commands, structured=False, exit_codes_approximate=True
    )


def _guess_exit(lines: list[str]) -> int:
    for line in lines:
        if explicit := _EXPLICIT_EXIT.search(line):
            return int(explicit.group(1))
    return 1 if any(_ERROR_MARKER.search(line) for line in lines) else 0


register_format(TranscriptFormat(FORMAT, lambda out: parse_plain(out.stdout, out.command_pattern)))
