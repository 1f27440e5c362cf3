"""`evaluation: {gates: [...]}`: the deterministic checks of a run's workspace and
commands, as declared; core.evaluation.gates runs them.

A gate type is one model class here, registered by `@gate` under the tag its `type`
field holds, and one evaluator in core.evaluation.gates registered against the same
class (this package may not import that one: it is pure). `Gate`, the union a
scenario's `gates:` is read as, and the tags the YAML errors know are derived from
`GATES`; tests/unit/test_extension_points.py fails when a model has no evaluator or
an evaluator no model (docs/EXTENDING.md, "A gate").
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal, TypeAlias, TypeVar, Union, get_args

from jsonpath_ng.exceptions import JsonPathLexerError, JsonPathParserError
from jsonpath_ng.ext import parse as parse_jsonpath
from pydantic import AfterValidator, Field, ValidationInfo, field_validator

from core.matrix.assertions import JsonAssertion, parse_assertion
from core.matrix.fields import Regex, Strict, context_of
from core.registry import Registry

# Re-exported by core.matrix as a whole, so that a gate type is exported where it is
# defined (its evaluator in core.evaluation.gates imports it from core.matrix).
__all__ = [
    "GATES",
    "CommandGate",
    "CommandJsonPath",
    "CommandOutputContains",
    "CommandOutputMatches",
    "CommandSucceeds",
    "FileContains",
    "FileExists",
    "FileMatches",
    "Gate",
    "GateModel",
    "NoTranscriptErrors",
    "Script",
    "gate",
    "gate_tag",
]


def _in_the_workspace(path: str, info: ValidationInfo) -> str:
    """A file gate's path as written: relative to the workspace and inside it. An absolute
    path, or one that climbs out (`../x`), is refused by the gate at every run (it never
    reads the host: core.evaluation.gates), so the matrix is refused before any run. A
    stored matrix (`check_files: False`) is read as it was submitted: its reports stay
    readable, and its runs' gates refuse such a path as they did."""
    if not context_of(info).get("check_files", True):
        return path
    if posixpath.isabs(path):
        raise ValueError(
            f"{path!r} is absolute; a gate's path is relative to the run's workspace "
            "(`out.txt`, `src/app.py`)"
        )
    if posixpath.normpath(path).split("/")[0] == "..":
        raise ValueError(f"{path!r} leaves the run's workspace; a gate reads only inside it")
    return path


# Where a file gate reads (a link inside that leads out is refused when the gate runs).
WorkspacePath = Annotated[str, AfterValidator(_in_the_workspace)]


def _jsonpath(expr: str) -> str:
    try:
        parse_jsonpath(expr)
    except (JsonPathLexerError, JsonPathParserError, Exception) as exc:
        raise ValueError(f"invalid JSONPath {expr!r}: {exc}") from None
    return expr


class GateModel(Strict):
    """What every gate has. A gate type subclasses it (or `CommandGate`) with a field
    `type: Literal["its_tag"]` and is registered with `@gate`."""

    if TYPE_CHECKING:
        # Each registered class declares its own; declared here it would also become the
        # first key of every gate in the JSON schema.
        type: str
    # It reads the run's transcript, not its workspace: a preflight, which has no
    # transcript, leaves it out (worker.preflight).
    reads_transcript: ClassVar[bool] = False

    name: str | None = Field(None, description="label shown in reports (default: the gate type)")
    timeout_s: float = Field(60.0, gt=0, allow_inf_nan=False)


GATES: Registry[type[GateModel]] = Registry("gate type")
G = TypeVar("G", bound=type[GateModel])


def gate_tag(model: type[GateModel]) -> str:
    """The `type:` a gate model is written with in matrix.yaml."""
    (tag,) = get_args(model.model_fields["type"].annotation)
    return str(tag)


def gate(model: G) -> G:
    """Registers a gate model under its tag."""
    GATES.add(gate_tag(model), model)
    return model


class CommandGate(GateModel):
    """A gate that runs a command (core.evaluation.gates runs it, then its evaluator
    judges how it ended)."""

    command: str
    where: Literal["container", "host"] = Field(
        "container",
        description="with `sandbox: docker`: run the command in the agent's container (the "
        "tools it had) or on the worker",
    )


@gate
class CommandSucceeds(CommandGate):
    type: Literal["command_succeeds"]


@gate
class CommandOutputContains(CommandGate):
    type: Literal["command_output_contains"]
    substring: str


@gate
class CommandOutputMatches(CommandGate):
    type: Literal["command_output_matches"]
    pattern: Regex


@gate
class CommandJsonPath(CommandGate):
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


@gate
class FileExists(GateModel):
    type: Literal["file_exists"]
    path: WorkspacePath


@gate
class FileContains(GateModel):
    type: Literal["file_contains"]
    path: WorkspacePath
    substring: str


@gate
class FileMatches(GateModel):
    type: Literal["file_matches"]
    path: WorkspacePath
    pattern: Regex


@gate
class NoTranscriptErrors(GateModel):
    type: Literal["no_transcript_errors"]
    reads_transcript: ClassVar[bool] = True


@gate
class Script(CommandGate):
    type: Literal["script"]
    description: str = ""


# The union exists only once the gates above are registered: a type checker sees a
# gate as its base class (evaluators get their own class), pydantic as the union of
# every registered gate type, told apart by its `type:`.
if TYPE_CHECKING:
    Gate: TypeAlias = GateModel
else:
    Gate = Annotated[Union[tuple(GATES.values())], Field(discriminator="type")]  # noqa: UP007
