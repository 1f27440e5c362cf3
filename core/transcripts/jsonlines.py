"""Reading JSON-lines output the way agent CLIs really print it.

Agent stdout is not clean JSON lines: stderr may be interleaved, a harness may
prefix lines (`Stdout: {...}`), the last line may be cut off when the agent is
killed, and `--output-format json` modes print one object or one array. Every
parser reads its input through `read_json_lines`, so these rules live once.

A line nested deeper than Python's JSON decoder recurses (about 1,000 `[`)
raises RecursionError, not ValueError: it is a malformed line like any other,
so one hostile line cannot turn the run into an infrastructure error. Nor can
a JSON escape of half a surrogate pair (`"\\udc80"`), which decodes to a string
no UTF-8 encoder takes: every string read is made encodable
(core.evidence.text.encodable) before a parser sees it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from core.evidence.text import each_text, encodable

JsonObject = dict[str, Any]
# What json.loads raises on text it cannot read: bad JSON, or JSON nested too deeply.
_UNREADABLE = (ValueError, RecursionError)


@dataclass
class JsonLines:
    objects: list[JsonObject] = field(default_factory=list)
    malformed: int = 0
    other_lines: list[str] = field(default_factory=list)  # non-JSON lines, for the judge's view


def read_json_lines(text: str) -> JsonLines:
    """The JSON objects in `text`, in order; other non-blank lines are counted as malformed.

    A whole document that parses (a pretty-printed object, or an array of messages)
    is taken as is. Otherwise each line is parsed, retrying from its first `{` so a
    prefix such as `Stdout: ` is tolerated; arrays on a line contribute their objects.
    """
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            document = _loads(stripped)
        except _UNREADABLE:
            pass
        else:
            result = JsonLines()
            _collect(document, stripped, result)
            return result
    result = JsonLines()
    for raw in text.splitlines():
        line = raw.strip()
        if line:
            _collect(_parse_line(line), line, result)
    return result


def _parse_line(line: str) -> Any:
    try:
        return _loads(line)
    except _UNREADABLE:
        start = line.find("{")
        if start <= 0:
            return None
        try:
            return _loads(line[start:])
        except _UNREADABLE:
            return None


def _loads(text: str) -> Any:
    value = json.loads(text)
    # Only an escape can make a lone surrogate: the text itself came decoded.
    return each_text(value, encodable) if "\\u" in text else value


def _collect(value: Any, line: str, result: JsonLines) -> None:
    items = value if isinstance(value, list) else [value]
    objects = [item for item in items if isinstance(item, dict)]
    result.objects.extend(objects)
    if not objects or len(objects) < len(items):
        result.malformed += 1
        result.other_lines.append(line)


def as_object(value: Any) -> JsonObject:
    """`value` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def count(mapping: Any, key: str) -> int:
    """A non-negative token count from `mapping[key]`; anything else counts as 0."""
    value = mapping.get(key) if isinstance(mapping, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return 0


def number(mapping: Any, key: str) -> float | None:
    """`mapping[key]` when it is a real number, else None."""
    value = mapping.get(key) if isinstance(mapping, dict) else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def text(mapping: Any, key: str) -> str | None:
    """`mapping[key]` when it is a string, else None."""
    value = mapping.get(key) if isinstance(mapping, dict) else None
    return value if isinstance(value, str) else None
