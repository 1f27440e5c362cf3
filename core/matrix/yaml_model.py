"""Reading YAML config files into models, with errors a person can act on.

A validation error names the file, the YAML line and column of the offending
value, the field path and what was expected. Generic over the model: the
matrix and its rubrics (core.matrix.loading) are both read here. A `prepare`
step may rewrite the file's data before it is validated (the matrix's task
folders become scenarios, core.matrix.task_folders), saying where each value of
its data comes from in the file, so that errors still point at the file's lines.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, Field, ValidationError

from core.errors import ConfigError
from core.matrix.fields import ALSO_REFUSED, PlacedError, PlacedErrors
from core.matrix.gates import GATES
from core.matrix.suggestions import did_you_mean, literal_choices, unknown_key_hint
from core.settings import setting

M = TypeVar("M", bound=BaseModel)
Loc = tuple[str | int, ...]
# A problem at a place of the file being read: (its location in the file's data, message).
Placer = Callable[[Sequence[str | int], str], "ConfigProblem"]
# Matrix and rubric files: a real one is a few KB. Larger ones cost memory on
# every worker (the matrix is stored with the experiment and read by each one).
ENV_MAX_CONFIG_BYTES = "EVALFLEET_MAX_CONFIG_BYTES"


class ConfigProblem(BaseModel):
    file: str
    line: int | None = None
    column: int | None = None
    field: str = ""
    message: str
    # The key or its value's type is wrong (unknown, missing, not one of the choices),
    # which the schema shows; not a check of the value itself (a file not found).
    schema_error: bool = Field(False, exclude=True)

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}:{self.column or 1}"
        field = f" {self.field}:" if self.field else ""
        return f"{where}:{field} {self.message}"


def _same_place(loc: Loc) -> tuple[Loc, str]:
    return loc, ""


@dataclass(frozen=True)
class Prepared:
    """The data a model is validated from, after `prepare` rewrote the file's, and
    `origin`: a location in `data` -> the location in the file it comes from and a
    note put before the message (e.g. which task folder gave the value)."""

    data: dict[str, Any]
    origin: Callable[[Loc], tuple[Loc, str]] = _same_place


def load_yaml_model(
    path: Path,
    model: type[M],
    base_dir: Path | None = None,
    context: Mapping[str, Any] | None = None,
    prepare: Callable[[dict[str, Any], Placer], Prepared] | None = None,
) -> M:
    """`context`: what the model is given besides `base_dir` (core.matrix.fields).
    `prepare`: rewrites the data before validation; it raises ConfigError for what it
    refuses, placed with the Placer it is given."""
    data, root = _read_yaml(path)
    context = {**(context or {}), "base_dir": base_dir or path.resolve().parent}

    def place(loc: Sequence[str | int], message: str) -> ConfigProblem:
        return _placed(path, root, loc, message)

    prepared = prepare(data, place) if prepare is not None else Prepared(data)
    try:
        return model.model_validate(prepared.data, context=context)
    except ValidationError as exc:
        found = [
            *exc.errors(),
            *({"type": "value_error", "loc": (), "msg": str(e), "ctx": {"error": e}}
              for e in context.get(ALSO_REFUSED, ())),
        ]  # fmt: skip
        problems = [
            problem
            for err in found
            for problem in _problems(path, root, err, model, prepared.origin)
        ]
        # Values a prepare step copied into several places fail once per copy; the rest
        # in the file's order.
        unique = sorted({str(p): p for p in problems}.values(), key=_file_order)
        raise ConfigError(unique) from None


def problem_at(path: Path, loc: Sequence[str | int], message: str) -> ConfigProblem:
    """A problem found after loading (the checks before spending, scheduler.mistakes),
    placed as a validation error is: the line and column of the value at `loc`."""
    return _placed(path, _read_yaml(path)[1], loc, message)


def _placed(
    path: Path, root: yaml.Node | None, loc: Sequence[str | int], message: str
) -> ConfigProblem:
    node = _node_at(root, list(loc))
    return ConfigProblem(
        file=str(path),
        line=node.start_mark.line + 1 if node is not None else None,
        column=node.start_mark.column + 1 if node is not None else None,
        field=".".join(str(part) for part in loc),
        message=message,
    )


def _read_yaml(path: Path) -> tuple[Any, yaml.Node | None]:
    most = int(setting(ENV_MAX_CONFIG_BYTES))
    try:
        if path.is_fifo() or path.is_socket():  # opening one would wait for a writer
            raise ConfigError([ConfigProblem(file=str(path), message="a pipe, not a file")])
        # At most one byte past the limit: /dev/zero or a huge file is refused
        # without being read whole.
        with path.open("rb") as file:
            raw = file.read(most + 1)
        if len(raw) > most:
            raise ConfigError(
                [
                    ConfigProblem(
                        file=str(path),
                        message=f"larger than {most:,} bytes, the most a config file "
                        f"may have (raise {ENV_MAX_CONFIG_BYTES} to allow more)",
                    )
                ]
            )
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError([ConfigProblem(file=str(path), message="file not found")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([ConfigProblem(file=str(path), message=f"cannot read: {exc}")]) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        raise ConfigError([yaml_syntax_problem(path, text, exc)]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([ConfigProblem(file=str(path), message=f"YAML error: {exc}")]) from None
    except RecursionError:
        raise ConfigError(
            [ConfigProblem(file=str(path), message="YAML nested too deeply to read")]
        ) from None
    twice = _keys_given_twice(path, root)
    if twice:
        raise ConfigError(twice)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            [
                ConfigProblem(
                    file=str(path), line=1, message="expected a mapping of keys at the top level"
                )
            ]
        )
    return data, root


def _file_order(problem: ConfigProblem) -> tuple[str, int, int]:
    return (problem.file, problem.line or 0, problem.column or 0)


def yaml_syntax_problem(path: Path, text: str, exc: yaml.MarkedYAMLError) -> ConfigProblem:
    """Placed where the parser stopped, with what it was reading and from where: an
    unclosed quote or bracket is found only at the end of the file, far below it."""
    mark = exc.problem_mark or exc.context_mark
    message = f"YAML syntax error: {exc.problem or exc.context}"
    began = exc.context_mark
    if exc.problem and exc.context and began is not None and began is not exc.problem_mark:
        message += (
            f" ({exc.context} that begins at line {began.line + 1}, column {began.column + 1})"
        )
    elif mark is not None and (opened := _unclosed_bracket(text, mark)) is not None:
        message += (
            f" (a bracket opened at line {opened.line + 1}, column {opened.column + 1} is not "
            "closed before it)"
        )
    return ConfigProblem(
        file=str(path),
        line=mark.line + 1 if mark else None,
        column=mark.column + 1 if mark else None,
        message=message,
    )


_OPENS = (yaml.FlowMappingStartToken, yaml.FlowSequenceStartToken)
_CLOSES = (yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


def _unclosed_bracket(text: str, stop: yaml.Mark) -> yaml.Mark | None:
    """Where the innermost `{` or `[` still open on a line above `stop` was opened: the
    parser, reading on into the next key, stops lines below the missing `}`."""
    opened: list[yaml.Mark] = []
    with contextlib.suppress(yaml.YAMLError):
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if token.start_mark.index >= stop.index:
                break
            if isinstance(token, _OPENS):
                opened.append(token.start_mark)
            elif isinstance(token, _CLOSES) and opened:
                opened.pop()
    return opened[-1] if opened and opened[-1].line < stop.line else None


def _keys_given_twice(path: Path, root: yaml.Node | None) -> list[ConfigProblem]:
    """A key given twice in one mapping, at its second place: YAML keeps the last one
    without a word, so the first is ignored and an error about the value points at
    the wrong line."""
    problems: list[ConfigProblem] = []
    seen: set[int] = set()  # an alias is the node it names: walked once
    stack = [root] if root is not None else []
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, yaml.Node] = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value != "<<":
                    if key.value in first:
                        line = first[key.value].start_mark.line + 1
                        problems.append(
                            ConfigProblem(
                                file=str(path),
                                line=key.start_mark.line + 1,
                                column=key.start_mark.column + 1,
                                field=key.value,
                                message=f"given twice (first at line {line}); YAML would keep "
                                "this one and ignore the first without a word: remove one",
                            )
                        )
                    first.setdefault(key.value, key)
                stack.append(value)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return sorted(problems, key=lambda p: (p.line or 0, p.column or 0))


def _problems(
    path: Path,
    root: yaml.Node | None,
    err: Any,
    model: type[BaseModel],
    origin: Callable[[Loc], tuple[Loc, str]] = _same_place,
) -> list[ConfigProblem]:
    """The problems of one pydantic error: one, or one per check across keys that a
    model validator found failing (PlacedErrors)."""
    placed = (err.get("ctx") or {}).get("error")
    if isinstance(placed, PlacedErrors):
        problems = [
            _problem(path, root, {**err, "msg": str(each), "ctx": {"error": each}}, model, origin)
            for each in placed.errors
        ]
        return sorted(problems, key=lambda p: (p.line or 0, p.column or 0))
    return [_problem(path, root, err, model, origin)]


def _problem(
    path: Path,
    root: yaml.Node | None,
    err: Any,
    model: type[BaseModel],
    origin: Callable[[Loc], tuple[Loc, str]],
) -> ConfigProblem:
    placed = (err.get("ctx") or {}).get("error")
    within = placed.loc if isinstance(placed, PlacedError) else ()
    loc, note = origin(tuple(part for part in err["loc"] if not _is_union_tag(part)) + within)
    node = _node_at(root, list(loc))
    message = note + _message(err, model)
    read_as = err.get("input")
    if (
        err["type"] == "string_type"
        and isinstance(read_as, bool | int | float)
        and isinstance(node, yaml.ScalarNode)
    ):
        # YAML read `1`, `yes` or `3.10` as a number or a truth value, not as the text.
        read = "true or false" if isinstance(read_as, bool) else "a number"
        message += f'; YAML read {node.value} as {read}: quote it ("{node.value}")'
    return ConfigProblem(
        file=str(path),
        line=node.start_mark.line + 1 if node is not None else None,
        column=node.start_mark.column + 1 if node is not None else None,
        field=".".join(str(p) for p in loc),
        message=message,
        schema_error=err["type"] not in ("value_error", "assertion_error"),
    )


def _is_union_tag(part: Any) -> bool:
    # Discriminated unions add the tag ("command_succeeds", a run count's "count") and
    # function-wrapper names to the location; they are not keys in the file (no model
    # has a field of those names).
    return isinstance(part, str) and (
        part.startswith("function-") or part in GATES or part in _RUNS_TAGS
    )


_RUNS_TAGS = {"count", "adaptive"}  # core.matrix.adaptive RunsPerTier


def _message(err: Any, model: type[BaseModel]) -> str:
    kind = err["type"]
    msg = str(err["msg"]).removeprefix("Value error, ")
    if kind == "extra_forbidden":
        hint = unknown_key_hint(model, err["loc"])
        return f"unknown key; {hint or 'check the spelling'} (`scheduler schema` lists every key)"
    if kind == "missing":
        return "required key is missing"
    if kind == "union_tag_invalid":
        gate = str(err.get("ctx", {}).get("tag", err.get("input")))
        return _with_hint(
            f"unknown gate type {gate!r}; expected one of: {', '.join(sorted(GATES))}",
            did_you_mean(gate, GATES),
        )
    if kind == "union_tag_not_found":
        return f"missing `type`; expected one of: {', '.join(sorted(GATES))}"
    if kind == "literal_error" and isinstance(err.get("input"), str):
        return _with_hint(msg, did_you_mean(err["input"], literal_choices(model, err["loc"])))
    return msg


def _with_hint(message: str, hint: str) -> str:
    return f"{message}; {hint}" if hint else message


def _node_at(root: yaml.Node | None, loc: list[Any]) -> yaml.Node | None:
    """The deepest YAML node along `loc` (a missing key points at its parent)."""
    node = root
    for part in loc:
        child = None
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if str(key.value) == str(part):
                    child = value
                    break
        elif (
            isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value)
        ):
            child = node.value[part]
        if child is None:
            return node
        node = child
    return node
