"""What the scripted model server answers: one `ModelScript`, read from YAML or JSON.

    turns:
      - text: "Writing the file."
        tool_calls: [{name: Bash, arguments: {command: "echo hi > out.txt"}}]
        usage: {input_tokens: 1200, output_tokens: 40}
      - error: {status: 429, retry_after: 1}
      - text: done

A conversation's next turn is found from the conversation itself: the number of
answers the model already gave in the request's history picks the reply turn, so
concurrent runs each walk the script from its start and a retried request gets the
same answer. An error turn is served `times` times, counted over every request
that reaches it (`per: server`) or per conversation (`per: conversation`, one told
from another by its first user message), before the turn after it answers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from core.matrix import load_yaml_model
from core.results.record import Record


class Usage(Record):
    """The tokens a turn reports; `input_tokens` excludes the cached ones (Anthropic's
    sense), the protocols that count cached input inside their input add them."""

    input_tokens: int = Field(default=100, ge=0)
    output_tokens: int = Field(default=20, ge=0)
    cache_read_tokens: int = Field(default=0, ge=0)
    cache_write_tokens: int = Field(default=0, ge=0)


class ScriptedToolCall(Record):
    name: str = Field(min_length=1, description="the tool's name as the CLI offers it")
    arguments: dict[str, Any] | str = Field(
        default_factory=dict,
        description="a string is sent verbatim as the arguments' JSON text (a malformed "
        "call) where the protocol carries text (OpenAI's); as an object where it carries "
        "one (parsed, or {} when it is not JSON)",
    )
    id: str | None = Field(default=None, description="the call's id (default: a fresh one)")


class ScriptedError(Record):
    status: int = Field(ge=400, le=599, description="429 rate limit, 529 overload, 401, ...")
    retry_after: float | None = Field(
        default=None, ge=0, description="seconds, sent as Retry-After"
    )
    message: str | None = None
    times: int = Field(default=1, ge=1, description="how often it is served before the next turn")
    per: Literal["server", "conversation"] = Field(
        default="server",
        description="count `times` over every request (a run sent again after the outage "
        "gets the next turn) or per conversation (each run meets the error)",
    )


class Turn(Record):
    """One answer of the model: text and/or tool calls with their usage, or an error."""

    text: str | None = None
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    error: ScriptedError | None = None
    delay_s: float = Field(default=0.0, ge=0, le=600, description="wait before answering")

    @model_validator(mode="after")
    def _one_kind(self) -> Turn:
        if self.error is not None and (self.text is not None or self.tool_calls):
            raise ValueError("a turn is either an error or an answer (text, tool_calls)")
        if self.error is None and self.text is None and not self.tool_calls:
            raise ValueError("a turn needs text, tool_calls or error")
        return self

    @property
    def is_reply(self) -> bool:
        return self.error is None


class ModelScript(Record):
    """The turns of every conversation, in order; past the end the last turn repeats."""

    turns: list[Turn] = Field(default_factory=lambda: [Turn(text="done")], min_length=1)


def load_model_script(path: str | Path) -> ModelScript:
    """Read a script file (YAML or JSON); problems name the file, line and field."""
    return load_yaml_model(Path(path), ModelScript)
