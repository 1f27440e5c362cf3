"""ExperimentReport -> what people read: a terminal table, markdown, HTML, CSV or JSON.

The tables themselves (which numbers, how written) come from scheduler/sections.py;
here they are laid out per format.
"""

from __future__ import annotations

import csv
import io
import re

from rich.console import Console
from rich.table import Table as RichTable

from core.analysis import PASS_K
from core.results import ExperimentComparison, ExperimentReport, Statistics
from scheduler import sections
from scheduler.html_report import html_report
from scheduler.sections import Table

FORMATS = ("table", "markdown", "json", "csv", "html")
COMPARE_FORMATS = ("table", "markdown", "json", "csv")
# Formats that can show the view of one scenario; json and csv always carry all of them.
SCENARIO_FORMATS = ("table", "markdown", "html")
# `<` opening an HTML tag in markdown (a user's text), not `<0.001`.
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")


def render(report: ExperimentReport, fmt: str, scenario: str | None = None) -> str:
    """The report in `fmt`; with `scenario` (table, markdown, html), that scenario's view."""
    if scenario is not None and fmt not in SCENARIO_FORMATS:
        raise ValueError(f"a scenario view is shown as {', '.join(SCENARIO_FORMATS)}, not {fmt}")
    if fmt == "json":
        return report.model_dump_json(indent=2)
    if fmt == "csv":
        return _csv(report)
    if fmt == "html":
        return html_report(report, scenario)
    title = sections.header(report) + (f" — scenario {scenario}" if scenario else "")
    if fmt == "markdown":
        tables = (
            sections.report_tables(report)
            if scenario is None
            else sections.scenario_tables(report, scenario)
        )
        return _markdown(title, tables)
    # The terminal gets the summary (with --scenario: the scenario's view first).
    if scenario is None:
        return _terminal(title, [sections.summary(report)])
    return _terminal(
        title, [sections.guidance(report, scenario), sections.summary(report, scenario)]
    )


def render_comparison(result: ExperimentComparison, fmt: str) -> str:
    if fmt == "json":
        return result.model_dump_json(indent=2)
    table = sections.comparison(result)
    if fmt == "csv":
        return _csv_table(table)
    if fmt == "markdown":
        return _markdown(table.title, [table])
    return _terminal(table.title, [table])


# --- layouts ---------------------------------------------------------------------------------


def _markdown(title: str, tables: list[Table]) -> str:
    lines = [f"# {_md(title)}"]
    for table in tables:
        lines += [
            "",
            f"## {_md(table.title)}",
            "",
            "| " + " | ".join(_md(c) for c in table.columns) + " |",
            "|" + "---|" * len(table.columns),
        ]
        lines += ["| " + " | ".join(_md(v) for v in row) + " |" for row in table.rows]
        if table.notes:
            lines += [""] + [f"- {_md(note)}" for note in table.notes]
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    """Cell text that cannot break a pipe table or open an HTML tag (a user's experiment
    name); `<0.001` stays as it is."""
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    return _TAG_START.sub("&lt;", text)


def _terminal(title: str, tables: list[Table]) -> str:
    console = Console(record=True, width=160, file=io.StringIO())
    console.print(title, highlight=False, markup=False)
    for table in tables:
        rich = RichTable(title=table.title, title_justify="left")
        for i, column in enumerate(table.columns):
            rich.add_column(column, justify="left" if i < table.label_columns else "right")
        for row in table.rows:
            rich.add_row(*row)
        console.print(rich)
        for note in table.notes:
            console.print(note, highlight=False, markup=False)
    return console.export_text()


def _csv_table(table: Table) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(table.columns)
    writer.writerows(table.rows)
    return out.getvalue()


_CSV_STATS = ("pass_rate", "impl_rate", "composite_score", "cost_usd", "duration_seconds")


def _csv(report: ExperimentReport) -> str:
    """One row per tier and tier x scenario, raw numbers (no formatting), for spreadsheets."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(
        ["tier", "scenario", "runs", "errors", "passes", "grade", "cost_of_pass"]
        + [f"{m}_{s}" for m in _CSV_STATS for s in ("median", "mean", "std_dev", "min", "max")]
        + ["pass_rate_ci_low", "pass_rate_ci_high"]
        + ["composite_median_ci_low", "composite_median_ci_high"]
        + ["vs_baseline_fisher_p", "vs_baseline_mann_whitney_p", "vs_baseline_verdict"]
        + [f"pass_at_{k}" for k in PASS_K]
        + [f"pass_hat_{k}" for k in PASS_K]
        + ["flaky_scenarios"]
    )
    for tier_id, scope, cell in sections.cells(report):
        a = cell.analysis
        vs = a.vs_baseline
        values: list[object] = []
        for metric in _CSV_STATS:
            st: Statistics = getattr(cell, metric)
            values += [st.median, st.mean, st.std_dev, st.min, st.max]
        for interval in (a.pass_rate_ci, a.composite_median_ci):
            values += [None, None] if interval is None else [interval.low, interval.high]
        values += [None, None, None] if vs is None else [vs.fisher_p, vs.mann_whitney_p, vs.verdict]
        values += [a.pass_at_k.get(k) for k in PASS_K] + [a.pass_hat_k.get(k) for k in PASS_K]
        values.append(";".join(a.flaky_scenarios))
        writer.writerow(
            [
                tier_id,
                "" if scope == sections.ALL else scope,
                cell.runs,
                cell.errors,
                cell.passes,
                cell.grade or "",
                cell.cost_of_pass,
            ]
            + ["" if v is None else v for v in values]
        )
    return out.getvalue()
