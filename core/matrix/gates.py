"""`evaluation: {gates: [...]}`: the deterministic checks of a run's workspace and
commands, as declared; core.evaluation.gates runs them."""

from __future__ import annotations

from typing import Annotated, Literal

from jsonpath_ng.exceptions import JsonPathLexerError, JsonPathParserError
from jsonpath_ng.ext import parse as parse_jsonpath
from pydantic import AfterValidator, Field, field_validator

from core.matrix.assertions import JsonAssertion, parse_assertion
from core.matrix.fields import Regex, Strict


def _jsonpath(expr: str) -> str:
    try:
        parse_jsonpath(expr)
    except (JsonPathLexerError, JsonPathParserError, Exception) as exc:
        raise ValueError(f"invalid JSONPath {expr!r}: {exc}") from None
    return expr


class _Gate(Strict):
    name: str | None = Field(None, description="label shown in reports (default: the gate type)")
    timeout_s: float = Field(60.0, gt=0, allow_inf_nan=False)


class _CommandGate(_Gate):
    command: str
    where: Literal["container", "host"] = Field(
        "container",
        description="with `sandbox: docker`: run the command in the agent's container (the "
        "tools it had) or on the worker",
    )


class CommandSucceeds(_CommandGate):
    type: Literal["command_succeeds"]


class CommandOutputContains(_CommandGate):
    type: Literal["command_output_contains"]
    substring: str


class CommandOutputMatches(_CommandGate):
    type: Literal["command_output_matches"]
    pattern: Regex


class CommandJsonPath(_CommandGate):
    type: Literal["command_json_path"]
    path: Annotated[str, AfterValidator(_jsonpath)]
    assertion: str

    @field_validator("assertion")
    @classmethod
    def _parses(cls, value: str) -> str:
        parse_assertion(value)
        return value

    @property
    def parsed_assertion(self) -> JsonAssertion:
        return parse_assertion(self.assertion)


class FileExists(_Gate):
    type: Literal["file_exists"]
    path: str


class FileContains(_Gate):
    type: Literal["file_contains"]
    path: str
    substring: str


class FileMatches(_Gate):
    type: Literal["file_matches"]
    path: str
    pattern: Regex


class NoTranscriptErrors(_Gate):
    type: Literal["no_transcript_errors"]


class Script(_CommandGate):
    type: Literal["script"]
    description: str = ""


Gate = Annotated[
    CommandSucceeds
    | CommandOutputContains
    | CommandOutputMatches
    | CommandJsonPath
    | FileExists
    | FileContains
    | FileMatches
    | NoTranscriptErrors
    | Script,
    Field(discriminator="type"),
]
