"""core.results.record: the base of every model: unknown keys are errors, and
non-finite floats are JSON (the strings "Infinity" and "NaN") that reads back."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from core.results.record import Record


class Figure(Record):
    value: float
    note: str = ""


def test_an_unknown_key_is_an_error_that_names_it() -> None:
    with pytest.raises(ValidationError, match="valu\n  Extra inputs are not permitted"):
        Figure.model_validate({"value": 1.0, "valu": 2.0})


@pytest.mark.parametrize(("value", "text"), [(math.inf, "Infinity"), (-math.inf, "-Infinity")])
def test_an_infinite_figure_is_a_json_string_and_reads_back(value: float, text: str) -> None:
    dumped = Figure(value=value).model_dump_json()
    assert json.loads(dumped) == {"value": text, "note": ""}
    assert Figure.model_validate_json(dumped).value == value


def test_nan_is_the_string_nan_and_reads_back_as_nan() -> None:
    dumped = Figure(value=math.nan).model_dump_json()
    assert json.loads(dumped)["value"] == "NaN"
    assert math.isnan(Figure.model_validate_json(dumped).value)
