"""A run's texts made storable (encodable), and inert and undisguised in a terminal
(visible)."""

from __future__ import annotations

import os

from core.evidence.text import each_text, encodable, visible


def test_an_undecodable_file_name_is_shown_with_its_bytes_escaped() -> None:
    name = os.fsdecode(b"bad\xffname.txt")
    assert encodable(name) == "bad\\xffname.txt"
    assert encodable("half a pair \ud800") == "half a pair \\ud800"
    assert encodable("whole \U0001f600 and plain") == "whole \U0001f600 and plain"


def test_control_characters_are_written_out_but_newlines_and_tabs() -> None:
    said = "\x1b]0;title\x07 \x1b[2J\r\x9b31m \x7f\tcol\nnext"
    assert visible(said) == "\\x1b]0;title\\x07 \\x1b[2J\\x0d\\x9b31m \\x7f\tcol\nnext"
    assert visible(os.fsdecode(b"f\xff\x1b")) == "f\\xff\\x1b"


def test_bidirectional_and_invisible_characters_are_written_out() -> None:
    # U+202E shows `txt.exe` as `exe.txt`; a zero-width space splits a word unseen.
    assert visible("invoice\u202etxt.exe") == "invoice\\u202etxt.exe"
    bidi = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    invisible = "\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff\u180e\u00ad"
    for char in bidi + invisible:
        assert visible(f"a{char}b") == f"a\\u{ord(char):04x}b"


def test_accents_cjk_and_emoji_stay_as_they_are() -> None:
    legitimate = [
        "café naïve Ærøskøbing ñandú",
        "漢字 かな 한국어",
        "שלום مرحبا",  # right-to-left letters are text, not controls
        "\U0001f600 \u2764\ufe0f \U0001f44d\U0001f3fd",
        "\U0001f469\u200d\U0001f4bb \U0001f468\u200d\U0001f469\u200d\U0001f467",  # ZWJ emoji
        "\U0001f3f3\ufe0f\u200d\U0001f308",  # a joiner after the variation selector
    ]
    for text in legitimate:
        assert visible(text) == text
    # A joiner outside an emoji is shown.
    assert visible("pass\u200dword \U0001f600\u200d") == "pass\\u200dword \U0001f600\\u200d"


def test_each_text_reaches_every_string_of_a_json_value() -> None:
    value = {"k\x1b": ["a\x07", {"b": "\x1b"}, 3, None], "n": 1.5}
    assert each_text(value, visible) == {"k\\x1b": ["a\\x07", {"b": "\\x1b"}, 3, None], "n": 1.5}
