"""A run's texts made storable (encodable) and inert in a terminal (visible)."""

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


def test_each_text_reaches_every_string_of_a_json_value() -> None:
    value = {"k\x1b": ["a\x07", {"b": "\x1b"}, 3, None], "n": 1.5}
    assert each_text(value, visible) == {"k\\x1b": ["a\\x07", {"b": "\\x1b"}, 3, None], "n": 1.5}
