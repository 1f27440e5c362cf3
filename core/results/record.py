"""The base of every evalfleet model: unknown keys are errors, and non-finite floats
serialize as the strings "Infinity"/"NaN" (the report's JSON contract): a cost of pass that never
passes is infinite, and bare `Infinity` is not JSON."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings", defer_build=True)
