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

Nor can a figure: whatever an agent writes is priced, summed and averaged as
floats, so a number no JSON writer prints (`NaN`, `Infinity`, `1e400`, an
integer of more than 20 digits, beyond any 64-bit count) makes its line
malformed, and the figures a parser reads are held to ceilings no real CLI
reaches (`count`: tokens, MAX_TOKENS; `cost`: dollars, MAX_COST_USD;
`duration`: milliseconds, MAX_DURATION_MS): beyond them a figure is read as one
that is not a number is (0 or None).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from core.evidence.text import each_text, encodable

JsonObject = dict[str, Any]
# What json.loads raises on text it cannot read: bad JSON, or JSON nested too deeply.
_UNREADABLE = (ValueError, RecursionError)

# The ceilings of a figure a parser reads (README, "The events file"): far above any
# real call's or run's, far below what a float sum over 100,000s of runs overflows at.
MAX_TOKENS = 10**12  # tokens of one figure (a call's input, a run's reported output)
MAX_COST_USD = 1_000_000.0  # dollars one run reports
MAX_DURATION_MS = 7 * 24 * 3600 * 1000.0  # a week: a call's latency, a run's duration
# Beyond every 64-bit integer: no JSON writer counts anything in more digits.
_MAX_INT_DIGITS = 20
# A figure a parser reads as a number at all (a count, a timestamp in ms): its
# differences and sums stay finite.
_MAX_NUMBER = 1e15


def _int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits is no figure")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400
        raise ValueError(f"{text} is beyond a float")
    return value


def _constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_int=_int, parse_float=_float, parse_constant=_constant)


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
    value = _DECODER.decode(text)
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
    """A token count from `mapping[key]`, 0 to MAX_TOKENS; anything else counts as 0."""
    value = mapping.get(key) if isinstance(mapping, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKENS:
        return value
    return 0


def number(mapping: Any, key: str) -> float | None:
    """`mapping[key]` when it is a real number within 10**15 of 0, else None."""
    value = mapping.get(key) if isinstance(mapping, dict) else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) if -_MAX_NUMBER <= value <= _MAX_NUMBER else None
    return None


def cost(mapping: Any, key: str) -> float | None:
    """Dollars from `mapping[key]`, 0 to MAX_COST_USD, else None."""
    return within(number(mapping, key), MAX_COST_USD)


def duration(mapping: Any, key: str) -> float | None:
    """Milliseconds from `mapping[key]`, 0 to MAX_DURATION_MS, else None."""
    return within(number(mapping, key), MAX_DURATION_MS)


def within(value: float | None, ceiling: float) -> float | None:
    """`value` when it is a number from 0 to `ceiling`, else None."""
    return value if value is not None and 0 <= value <= ceiling else None


def text(mapping: Any, key: str) -> str | None:
    """`mapping[key]` when it is a string, else None."""
    value = mapping.get(key) if isinstance(mapping, dict) else None
    return value if isinstance(value, str) else None
