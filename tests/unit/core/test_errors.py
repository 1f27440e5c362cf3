"""core.errors: one hierarchy with one base, drawn in its module's docstring."""

from __future__ import annotations

import inspect
import re

import pytest

from core import errors
from core.errors import (
    BrokerURLError,
    ConfigError,
    EvalfleetError,
    ExperimentNotFound,
    FleetError,
    InputError,
    RetryLater,
    SettingError,
)

CLASSES = [
    c for _, c in inspect.getmembers(errors, inspect.isclass) if c.__module__ == errors.__name__
]


def test_every_error_has_the_common_base_and_is_drawn_in_the_docstring() -> None:
    drawn = re.findall(r"[├└]── (\w+)", errors.__doc__ or "")
    assert sorted(drawn) == sorted(c.__name__ for c in CLASSES if c is not EvalfleetError)
    for cls in CLASSES:
        assert issubclass(cls, EvalfleetError), cls


@pytest.mark.parametrize(
    ("error", "also"),
    [
        (SettingError("x"), ValueError),
        (BrokerURLError("x"), ValueError),
        (ExperimentNotFound("x"), KeyError),
        (errors.WorkersDied("x"), RuntimeError),
    ],
)
def test_errors_keep_the_builtin_base_their_callers_catch(error: Exception, also: type) -> None:
    assert isinstance(error, also)


def test_input_and_fleet_errors_are_apart() -> None:
    """The CLI exits 2 for the one and 1 for the other."""
    inputs = {c for c in CLASSES if issubclass(c, InputError)}
    fleet = {c for c in CLASSES if issubclass(c, FleetError)}
    assert not inputs & fleet
    assert ConfigError in inputs and errors.BrokerUnreachable in fleet


def test_messages() -> None:
    assert str(ExperimentNotFound("exp-1")) == (
        "no experiment 'exp-1' in this store (see `scheduler list`)"
    )
    config = ConfigError(["m.yaml:2: one", "m.yaml:3: two"])
    assert config.problems == ["m.yaml:2: one", "m.yaml:3: two"]
    assert str(config) == "m.yaml:2: one\nm.yaml:3: two"
    later = RetryLater(2.5, ["429 from the provider", "503 from the provider"])
    assert (later.wait_s, str(later)) == (2.5, "retry in 2.5 s after: 503 from the provider")
