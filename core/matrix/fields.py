"""What every model of the matrix is built from: the strict base, paths, patterns, numbers.

A model here is a function of the matrix's text and the validation context
(``model_validate(..., context=...)``), which the loading step (core.matrix.loading)
fills and a stored matrix's reader (core.store) sets for a worker:

- ``base_dir``: the matrix file's folder; relative paths resolve against it.
- ``check_files``: whether the files the matrix names must exist (default: they must).
  A stored matrix is read without: its files are the submitter's.
- ``relocate``: the submitter's path of an input file -> the worker's copy of it.
- ``environ``: the environment ``judge: {enabled: auto}`` is decided by (default: none).
- ``read_rubric``: reads a scenario's rubric file, so that its errors are the matrix's
  (default: the rubric is not read).
- ``allow_outside_files``: the matrix's own key, put here by Matrix before its fields are
  read, so that every input path (FilePath, DirPath, ``base_dir``) is held to it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True, defer_build=True)


def context_of(info: ValidationInfo) -> dict[str, Any]:
    return info.context or {}


def resolve(value: Path, info: ValidationInfo) -> Path:
    # Path.resolve reads the file system (links) and expanduser the home folder: they
    # stay in the validator, as the resolved path is what a stored matrix holds and what
    # the check that tier files are inside the matrix folder must see (a link in the
    # folder to a file outside it is outside).
    base = context_of(info).get("base_dir")
    try:
        path = value.expanduser()
    except RuntimeError:  # `~name` of no user here
        raise ValueError(f"{value}: no user {value.parts[0][1:]!r} on this machine") from None
    if not path.is_absolute() and base is not None:
        path = Path(base) / path
    return path.resolve() if base is not None else path


def inside_matrix_folder(path: Path, info: ValidationInfo) -> Path:
    """`path` (resolved) unless it lies outside the matrix file's folder: every input
    path is shipped to the workers and read by the agent or the judge, so
    `prompt_file: /etc/shadow` would hand the submitter's file to every agent."""
    context = context_of(info)
    base = context.get("base_dir")
    # A stored matrix has absolute paths and no folder to check against.
    if base is None or context.get("allow_outside_files"):
        return path
    folder = Path(base).resolve()
    if not path.is_relative_to(folder):
        raise ValueError(
            f"{path} is outside the matrix folder {folder}. Every path the matrix names is "
            "shipped to the workers, where the agent (and the judge) can read it: move it "
            "into the matrix folder, or set `allow_outside_files: true` at the top level to "
            "allow it"
        )
    return path


def relocated(path: Path, info: ValidationInfo) -> Path:
    """An input file of a stored matrix read on a worker: the submitter's path -> the
    worker's copy of it (core.files.bundle, Manifest.relocation). Outputs (the artifacts
    folder) keep their path: every machine shares it."""
    relocate = context_of(info).get("relocate")
    return relocate(path) if relocate is not None else path


def _existing(kind: Literal["file", "dir", "file or folder"]) -> Any:
    # The one look at the file system a validator makes unasked: a missing file is an
    # error at its key and YAML line, reported with the matrix's other problems, which
    # only pydantic's own error of the field carries. `check_files: False` skips it.
    def check(value: Path, info: ValidationInfo) -> Path:
        path = inside_matrix_folder(resolve(value, info), info)
        if context_of(info).get("check_files", True):
            exists = {"file": path.is_file, "dir": path.is_dir}.get(kind, path.exists)()
            if not exists and path.exists():  # there, but of the other kind
                other = "a folder" if path.is_dir() else "not a folder"
                raise ValueError(f"expected a {kind}, but {path} is {other}")
            if not exists:
                raise ValueError(f"{kind} not found: {path}")
        return relocated(path, info)

    return AfterValidator(check)


FilePath = Annotated[Path, _existing("file")]
DirPath = Annotated[Path, _existing("dir")]
# A task's solution: Harbor's solution/ folder, or Terminal-Bench's one solution.sh.
FileOrDirPath = Annotated[Path, _existing("file or folder")]


def _compiles(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    return pattern


Regex = Annotated[str, AfterValidator(_compiles)]


def _reachable(url: str) -> str:
    # Checked here, not when the first run calls it: by then every agent has run (and
    # spent), and rejudging reuses the stored URL.
    example = "as in http://127.0.0.1:8000/v1 or https://api.openai.com/v1"
    parts = urlsplit(url)
    if url != url.strip() or any(c.isspace() for c in url):
        raise ValueError(f"{url!r} has a space in it: remove it ({example})")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL: give its scheme and host, {example}")
    try:
        port = parts.port  # reading it checks it: a port past 65535 raises
    except ValueError:
        port = 0
    if port == 0:
        raise ValueError(f"{url!r}: its port is not a port (1-65535)")
    if parts.username is not None or parts.password is not None:
        # Printed by validate, stored with the matrix, shown in reports: never a secret.
        raise ValueError(
            f"{urlsplit(url)._replace(netloc='…@' + parts.netloc.rpartition('@')[2]).geturl()!r} "
            "carries credentials: give the key in the variable `api_key_env` names instead"
        )
    return url


HttpUrl = Annotated[str, AfterValidator(_reachable)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Weight = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
Identifier = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)]


class PlacedError(ValueError):
    """A check across keys that failed, with the key the file should be read at: `loc`,
    from the model that raised it (a model validator's error is otherwise the whole
    model's, placed at its first line)."""

    def __init__(self, loc: tuple[str | int, ...], message: str):
        super().__init__(message)
        self.loc = loc


# The validation context's list of PlacedErrors found beside a ValidationError, which
# the loading step says with its errors (a model validator that raises ends validation).
ALSO_REFUSED = "also_refused"


class PlacedErrors(ValueError):
    """Every check across keys of one model that failed, each placed: a model validator
    ends at the first error it raises, and a matrix with five such mistakes would need
    five runs of `validate` to show them all."""

    def __init__(self, errors: list[PlacedError]):
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors

    @staticmethod
    def raise_any(errors: list[PlacedError]) -> None:
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise PlacedErrors(errors)


def duplicates(
    values: Sequence[str | None], what: str, at: tuple[str, ...] = ()
) -> list[PlacedError]:
    """`values`, the `id`s of the list at `at` (None: an entry without one), each once:
    an error at each repeat."""
    seen: set[str] = set()
    errors = []
    for index, value in enumerate(values):
        if value is None:
            continue
        if value in seen:
            message = f"duplicate {what} {value!r}; each must be unique"
            errors.append(PlacedError((*at, index, "id"), message))
        seen.add(value)
    return errors
