"""core.modelserver.script: a script's turns, each an answer or an error, read from a
file with problems placed at their line."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from core.errors import ConfigError
from core.modelserver import ModelScript, Turn, load_model_script


def test_a_turn_is_an_answer_or_an_error_never_both_nor_neither() -> None:
    assert Turn(text="hi").is_reply
    assert not Turn.model_validate({"error": {"status": 429}}).is_reply
    with pytest.raises(ValidationError, match="either an error or an answer"):
        Turn.model_validate({"text": "hi", "error": {"status": 500}})
    with pytest.raises(ValidationError, match="needs text, tool_calls or error"):
        Turn()


def test_an_error_is_an_http_error_served_at_least_once() -> None:
    with pytest.raises(ValidationError):
        Turn.model_validate({"error": {"status": 200}})
    with pytest.raises(ValidationError):
        Turn.model_validate({"error": {"status": 429, "times": 0}})
    error = Turn.model_validate({"error": {"status": 529}}).error
    assert error is not None and (error.times, error.per) == (1, "server")


def test_the_default_script_answers_done_and_an_empty_one_is_refused() -> None:
    assert ModelScript().turns == [Turn(text="done")]
    with pytest.raises(ValidationError):
        ModelScript(turns=[])


def test_a_script_file_is_read_and_its_mistakes_placed(tmp_path: Path) -> None:
    good = tmp_path / "script.yaml"
    good.write_text(
        "turns:\n"
        "  - text: Writing.\n"
        "    tool_calls: [{name: Bash, arguments: {command: ls}}]\n"
        "    usage: {input_tokens: 1200, output_tokens: 40}\n"
        "  - error: {status: 429, retry_after: 1, per: conversation}\n"
    )
    script = load_model_script(good)
    assert script.turns[0].tool_calls[0].arguments == {"command": "ls"}
    assert script.turns[0].usage.input_tokens == 1200
    assert script.turns[1].error is not None and script.turns[1].error.per == "conversation"
    bad = tmp_path / "bad.yaml"
    bad.write_text("turns:\n  - text: ok\n  - error: {status: 429, tiems: 2}\n")
    with pytest.raises(ConfigError) as raised:
        load_model_script(bad)
    assert str(raised.value) == (
        f"{bad}:3:33: turns.1.error.tiems: unknown key; did you mean `times`? "
        "(`scheduler schema` lists every key)"
    )
