"""Texts that came from a run (an agent's output, its file names, a gate's or a
judge's answer) made safe to keep and to show, whatever bytes they carry.

`encodable` is for everything stored or sent: a file name the operating system
gave as undecodable bytes (Python's surrogateescape) would make any UTF-8
encoder raise, and what an agent names its files must never decide its outcome.
`visible` is for everything printed to a terminal: a control character an agent
printed (an escape sequence that sets the window title, writes the clipboard or
moves the cursor over the lines above) is shown, never obeyed; and so is a
character that changes what a text seems to say without being seen itself: a
bidirectional control (U+202E turns `exe.txt` around) or a zero-width one (a
file name with a space no reader sees).
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
# Bidirectional controls: the Arabic letter mark, LRM and RLM, the embeddings and
# overrides (U+202A-U+202E), the isolates (U+2066-U+2069).
_BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
# Zero-width and invisible: spaces and joiners (U+200B-U+200D), the word joiner and
# invisible operators (U+2060-U+2064), the BOM, the Mongolian vowel separator, the
# soft hyphen.
_INVISIBLE = [*range(0x200B, 0x200E), *range(0x2060, 0x2065), 0xFEFF, 0x180E, 0x00AD]
_SHOWN = _CONTROLS | {code: f"\\u{code:04x}" for code in [*_BIDI, *_INVISIBLE]}
# The joiner that makes one emoji of several (👩‍💻, 🏳️‍🌈) is the emoji's own, not a
# disguise: kept between pictographs (after an emoji's variation selector too).
_PICTOGRAPH = "\u2600-\u27bf\U0001f000-\U0001faff"
_EMOJI_JOINER = re.compile(f"(?<=[{_PICTOGRAPH}\ufe0f])\u200d(?=[{_PICTOGRAPH}])")


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
    ``\\xNN`` escape, so that printing it moves nothing and sets nothing, and every
    bidirectional control and invisible character as its ``\\uNNNN`` escape, so that
    it shows what it holds. Other text (accents, CJK, emoji) stays as it is."""
    parts = _EMOJI_JOINER.split(encodable(text))
    return "\u200d".join(part.translate(_SHOWN) for part in parts)


def each_text(value: Any, change: Callable[[str], str], kept: frozenset[str] = frozenset()) -> Any:
    """`value` (JSON-like: dicts, lists, scalars) with `change` applied to every
    string in it, keys included but those in `kept` (a model's own field names)."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, list):
        return [each_text(item, change, kept) for item in value]
    if isinstance(value, dict):
        return {
            key if key in kept else each_text(key, change, kept): each_text(item, change, kept)
            for key, item in value.items()
        }
    return value


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def last_lines(text: str, most: int) -> str:
    """The last whole lines of `text` within `most` characters: a line cut at its start
    reads as garbage ("last):" of "Traceback (most recent call last):"). A last line
    alone longer than that is cut to its end."""
    text = text.strip()
    if len(text) <= most:
        return text
    tail = text[-most:]
    start = tail.find("\n")
    return tail[start + 1 :] if start != -1 and start + 1 < len(tail) else tail


def last_line_first(tail: str) -> str:
    """stderr's tail with its last line first: a program's last words say why it failed
    (a Python traceback's exception, after "Traceback (most recent call last):"), and
    the tables of reasons show a reason's first line only."""
    last = tail.splitlines()[-1].strip()
    return last if last == tail else f"{last}\n{tail}"
