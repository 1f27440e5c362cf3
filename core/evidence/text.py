"""Texts that came from a run (an agent's output, its file names, a gate's or a
judge's answer) made safe to keep and to show, whatever bytes they carry.

`encodable` is for everything stored or sent: a file name the operating system
gave as undecodable bytes (Python's surrogateescape) would make any UTF-8
encoder raise, and what an agent names its files must never decide its outcome.
`visible` is for everything printed to a terminal: a control character an agent
printed (an escape sequence that sets the window title, writes the clipboard or
moves the cursor over the lines above) is shown, never obeyed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 (but newline and tab, which keep the text's shape), DEL and C1.
_CONTROLS = {
    code: f"\\x{code:02x}" for code in [*range(0x20), *range(0x7F, 0xA0)] if chr(code) not in "\n\t"
}


def encodable(text: str) -> str:
    """`text` as valid UTF-8: a byte smuggled in as a surrogate (an undecodable
    file name) as ``\\xNN``, any other lone surrogate as ``\\uNNNN``."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return _SURROGATE.sub(_escaped, text)
    return text


def visible(text: str) -> str:
    """`text` with every control character but newline and tab written as its
    ``\\xNN`` escape, so that printing it moves nothing and sets nothing."""
    return encodable(text).translate(_CONTROLS)


def each_text(value: Any, change: Callable[[str], str]) -> Any:
    """`value` (JSON-like: dicts, lists, scalars) with `change` applied to every
    string in it, keys included."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, list):
        return [each_text(item, change) for item in value]
    if isinstance(value, dict):
        return {each_text(key, change): each_text(item, change) for key, item in value.items()}
    return value


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"
