"""The formats a report is rendered in (scheduler.report.render), named apart from
the rendering: the CLI's options list them in `--help`, which must not import
what rendering needs (pydantic's models, rich)."""

from __future__ import annotations

FORMATS = ("table", "markdown", "github", "json", "csv", "html")
COMPARE_FORMATS = ("table", "markdown", "github", "json", "csv")
# Formats that can show the view of one scenario; json and csv always carry all of them.
SCENARIO_FORMATS = ("table", "markdown", "html")
# How JSON writes Infinity and NaN: DESIGN's strings "Infinity"/"NaN" (the
# models' own serialization), or null for jq, pandas and the like.
NONFINITE = ("string", "null")
