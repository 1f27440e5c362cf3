"""ExperimentReport -> what people read: a terminal table, markdown, HTML, CSV or JSON.

The tables themselves (which numbers, how written) come from scheduler.report.sections
and scheduler.report.compare; here they are laid out per format.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import replace

from pydantic import BaseModel
from pydantic_core import to_json
from rich import box
from rich.console import Console
from rich.table import Table as RichTable

from core.analysis.group import PASS_K
from core.evidence.text import visible
from core.metrics.catalog import RUN_METRICS
from core.results.report import Comparison, ExperimentComparison, ExperimentReport, Statistics
from core.results.run import RunResult
from scheduler.report import compare, formatting, scenarios, sections
from scheduler.report.brief import brief_tables, full_report_line, verdict_table
from scheduler.report.formats import NONFINITE, SCENARIO_FORMATS
from scheduler.report.formatting import WORDS_WIDTH, Table, bounds, pass_share
from scheduler.report.github import github_comparison, github_report
from scheduler.report.html import html_report
from scheduler.report.markdown import md, table_lines

# Table width when stdout is not a terminal (a file, a CI log) and COLUMNS is unset.
DEFAULT_WIDTH = 120


def terminal_width() -> int:
    """COLUMNS when set, else the width of the terminal stdout is, else DEFAULT_WIDTH."""
    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns


# wide: keyword-only options of the output (the CLI's flags): each caller names those it sets
def render(
    report: ExperimentReport,
    fmt: str,
    scenario: str | None = None,
    *,
    width: int | None = None,
    nonfinite: str = "string",
    evidence: Mapping[str, bytes] | None = None,
    full: bool = True,
    complete: Callable[[str], str] | None = None,
    show_version: int | None = None,
) -> str:
    """The report in `fmt`; with `scenario` (table, markdown, html), that scenario's view.
    `width`: of the table format (default: terminal_width()); `nonfinite`: of json;
    `evidence`: of html, the runs' evidence by run id as the store keeps it
    (compressed JSON), for its run table; `full=False`: the table format's one screen
    (scheduler.report.brief), else every section, the one screen's first (the failure
    reasons need the report's runs); `complete`:
    of the table format, each text that suggests commands, before it is laid out (the
    CLI adds the broker it was given); `show_version`: the version the failure reasons'
    `scheduler show RUN` must name for the run's result to be this report's (None:
    `show`'s default version is this report's)."""
    if scenario is not None and fmt not in SCENARIO_FORMATS:
        raise ValueError(f"a scenario view is shown as {', '.join(SCENARIO_FORMATS)}, not {fmt}")
    if fmt == "json":
        return to_json_text(report, nonfinite)
    if fmt == "csv":  # rows only, for csv readers: the CLI says the banner on stderr
        return _csv(report) if report.runs is None else _runs_csv(report.runs)
    banner = sections.banner(report)
    if fmt == "html":
        return html_report(report, scenario, evidence)
    if fmt == "github":
        return github_report(report)
    title = sections.header(report) + (f" — scenario {scenario}" if scenario else "")
    if fmt == "markdown":
        tables = _tables(report, scenario, show_version)
        return "".join(f"> **{md(line)}**\n\n" for line in banner) + _markdown(title, tables)
    hint = complete or _as_is
    lead = "".join(f"{visible(hint(line))}\n" for line in banner)
    if not full and scenario is None:
        return (
            lead
            + _terminal(title, brief_tables(report, show_version), width, hint)
            + "\n"
            + fill(
                hint(full_report_line(report, pinned=show_version is not None)),
                width or terminal_width(),
            )
            + "\n"
        )
    return lead + _terminal(title, _tables(report, scenario, show_version), width, hint)


def _tables(
    report: ExperimentReport, scenario: str | None, show_version: int | None = None
) -> list[Table]:
    """Every section: the full report opens with what its one screen shows (each tier's
    verdict, why runs failed with a run to `scheduler show`), then the rest. Why runs
    failed is read from the runs: a report without them (`report.runs`) leaves it out
    rather than say that none failed."""
    if scenario is None:
        lead = (
            brief_tables(report, show_version)
            if report.runs is not None
            else [verdict_table(report)]
        )
        return _said_once(lead + sections.report_tables(report))
    return sections.scenario_tables(report, scenario)


def _said_once(tables: list[Table]) -> list[Table]:
    """Each note under the first table that has it: the full report opens with the one
    screen, whose notes (the agents' isolation, tampered runs, outages, the tests'
    family) the sections after it say again."""
    seen: set[str] = set()
    kept = []
    for table in tables:
        notes = [note for note in table.notes if note not in seen]
        seen.update(notes)
        kept.append(replace(table, notes=notes))
    return kept


def _as_is(text: str) -> str:
    return text


def render_comparison(
    result: ExperimentComparison,
    fmt: str,
    *,
    width: int | None = None,
    nonfinite: str = "string",
) -> str:
    if fmt == "json":
        return to_json_text(result, nonfinite)
    if fmt == "github":
        return github_comparison(result)
    if fmt == "csv":
        return _comparison_csv(result)
    table = compare.comparison(result)
    title = compare.comparison_title(result)
    across = scenarios.comparison_questions_table(result)
    tables = [table] if across is None else [table, across]
    if fmt == "markdown":
        return _markdown(title, tables)
    return _terminal(title, tables, width)


def to_json_text(model: BaseModel, nonfinite: str = "string") -> str:
    """One JSON document; Infinity and NaN as the strings DESIGN documents, or as null."""
    if nonfinite not in NONFINITE:
        raise ValueError(f"nonfinite is one of {', '.join(NONFINITE)}, not {nonfinite!r}")
    if nonfinite == "string":
        return model.model_dump_json(indent=2)
    # The models' config says "strings"; their plain values can be written another way.
    return to_json(model.model_dump(), indent=2, inf_nan_mode="null").decode()


# --- layouts ---------------------------------------------------------------------------------

# A command or an id to copy, in a note or a line: never broken across lines.
_COMMAND = re.compile(r"`[^`\n]*`")
# Stands for a space inside a command while the text is wrapped (a private-use character).
_KEPT_SPACE = "\ue000"


def fill(text: str, width: int) -> str:
    """`text` in lines of at most `width`, broken at spaces but never inside a
    `command` or a word: one longer than a line gets a line of its own, as long as
    it is (a terminal folds it there, and copying it gives it whole)."""
    kept = _COMMAND.sub(lambda m: m.group().replace(" ", _KEPT_SPACE), text)
    lines = textwrap.wrap(kept, width, break_long_words=False, break_on_hyphens=False)
    return "\n".join(lines).replace(_KEPT_SPACE, " ")


def _markdown(title: str, tables: list[Table]) -> str:
    lines = [f"# {md(title)}"]
    for table in tables:
        lines += ["", f"## {md(table.title)}", "", *table_lines(_commands_in_cells(table))]
        if table.notes:
            lines += [""] + [f"- {md(note)}" for note in table.notes]
    return "\n".join(lines) + "\n"


def _commands_in_cells(table: Table) -> Table:
    """A table whose rows carry a command to copy (the failure reasons' `scheduler show
    RUN`), each command in its row's last cell, as code: a pipe table has no line
    under a row to hold it."""
    if not table.commands:
        return table
    rows = [
        [*row[:-1], f"{row[-1]} ({_code(command)})" if command else row[-1]]
        for row, command in zip(table.rows, table.commands, strict=True)
    ]
    return replace(table, rows=rows, commands=())


def _code(command: str) -> str:
    """ "e.g. scheduler show RUN" as "e.g. `scheduler show RUN`"."""
    prefix = "e.g. " if command.startswith("e.g. ") else ""
    return f"{prefix}`{command.removeprefix(prefix)}`"


def render_tables(tables: list[Table], width: int | None = None) -> str:
    """Tables for the terminal as a report's are laid out, without a report's title."""
    return _terminal(None, tables, width)


def _terminal(
    title: str | None,
    tables: list[Table],
    width: int | None,
    complete: Callable[[str], str] = _as_is,
) -> str:
    """Compact tables no wider than `width`. A table that does not fit leaves out its
    `narrow_drop` columns (and says so); if it still does not, its other columns go on
    in a second block below, the row labels repeated, rather than being cut. A text
    from a run (a fail reason quoting the agent) is shown with its control
    characters made visible, never obeyed by the terminal. `complete`: of the notes
    and the rows' commands, which suggest commands."""
    tables = [
        replace(
            table,
            title=visible(table.title),
            rows=[[visible(cell) for cell in row] for row in table.rows],
            notes=[visible(complete(note)) for note in table.notes],
            commands=tuple(visible(complete(command)) for command in table.commands),
        )
        for table in tables
    ]
    console = Console(record=True, width=width or terminal_width(), file=io.StringIO(), emoji=False)
    if title is not None:
        console.print(visible(title), highlight=False, markup=False)
    for table_index, table in enumerate(tables):
        if title is not None or table_index:
            console.print()
        if table.commands:
            console.print(_with_commands(table, console.width), soft_wrap=True, markup=False)
            _notes(console, table.notes)
            continue
        value_columns = list(range(table.label_columns, len(table.columns)))
        dropped: list[str] = []
        for column in table.narrow_drop:
            if _width(console, table, value_columns) <= console.width:
                break
            dropped.append(column)
            value_columns.remove(table.columns.index(column))
        for block, columns in enumerate(_blocks(console, table, value_columns)):
            if block:
                console.print()
            # Headings whole where the block fits with them so, else wrapped.
            whole = _width(console, table, columns, whole_headings=True) <= console.width
            # The title at the console's width: rich wraps a table's own at the table's.
            # An untitled table (`list`, `status`) starts at its header.
            if table.title:
                heading = table.title + (" (continued)" if block else "")
                console.print(fill(heading, console.width), soft_wrap=True, markup=False)
            console.print(_rich_table(table, columns, whole_headings=whole))
        notes = list(table.notes)
        if dropped:
            notes.append(
                f"left out at {console.width} columns: {', '.join(dropped)} "
                "(a wider terminal, COLUMNS=200 or --format markdown shows them)"
            )
        _notes(console, notes)
    return console.export_text()


def _notes(console: Console, notes: list[str]) -> None:
    for note in notes:
        console.print(fill(f"- {note}", console.width), soft_wrap=True, markup=False)


def _with_commands(table: Table, width: int) -> str:
    """A table whose rows each carry a command to copy, laid out here rather than by
    rich so that the command is never wrapped or cut: every column but the last as wide
    as its widest cell, the last wrapped at its words in the width left; under each
    row its command, in the last column where it fits, else on a line of its own."""
    widths = [
        max(len(c) for c in [table.columns[i], *(r[i] for r in table.rows)])
        for i in range(len(table.columns) - 1)
    ]
    start = sum(w + 2 for w in widths)
    room = max(width - start, 20)

    def line(cells: list[str], last: str) -> str:
        return "  ".join([*(c.ljust(w) for c, w in zip(cells, widths, strict=True)), last])

    heading = textwrap.wrap(table.columns[-1], room) or [""]
    head = [line(table.columns[:-1], heading[0])] + [" " * start + h for h in heading[1:]]
    body = []
    for row, command in zip(table.rows, table.commands, strict=True):
        wrapped = textwrap.wrap(row[-1], room, break_on_hyphens=False) or [""]
        body.append(line(row[:-1], wrapped[0]))
        body += [" " * start + rest for rest in wrapped[1:]]
        if command:
            body.append((" " * start if start + len(command) <= width else "") + command)
    rule = "─" * min(width, max(len(x) for x in head + body))
    lines = [table.title, *head, rule, *body]
    return "\n".join(x.rstrip() for x in lines)


def _blocks(console: Console, table: Table, value_columns: list[int]) -> list[list[int]]:
    """The value columns in runs that fit the console beside the label columns (one
    column at least, which then wraps)."""
    blocks: list[list[int]] = [[]]
    for column in value_columns:
        if blocks[-1] and _width(console, table, blocks[-1] + [column]) > console.width:
            blocks.append([])
        blocks[-1].append(column)
    return blocks


def _width(
    console: Console, table: Table, value_columns: list[int], whole_headings: bool = False
) -> int:
    """The width the table takes unwrapped with these value columns."""
    unbounded = console.options.update_width(10 * console.width + 1000)
    laid_out = _rich_table(table, value_columns, whole_headings=whole_headings)
    return console.measure(laid_out, options=unbounded).maximum


def _rich_table(table: Table, value_columns: list[int], whole_headings: bool = False) -> RichTable:
    rich = RichTable(
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        collapse_padding=True,
    )
    for i in range(table.label_columns):
        rich.add_column(table.columns[i], no_wrap=True)
    for i in value_columns:
        heading = table.columns[i]
        # As wide as its widest value: the heading wraps, down to its longest word
        # (unless whole_headings, where the table fits with them whole).
        words = [heading] if whole_headings else heading.split()
        widest = max([*map(len, words), *(len(row[i]) for row in table.rows)])
        if heading in table.words:
            longest_word = max(len(w) for row in table.rows for w in [*row[i].split(), ""])
            widest = min(widest, max(WORDS_WIDTH, longest_word))
            rich.add_column(heading, justify="left", max_width=widest)
            continue
        rich.add_column(heading, justify="right", max_width=widest)
    for row in table.rows:
        rich.add_row(*row[: table.label_columns], *(row[i] for i in value_columns))
    return rich


def _csv_table(table: Table) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.columns)
    writer.writerows(table.rows)
    return out.getvalue()


_CSV_METRICS = [m.name for m in RUN_METRICS if m.in_csv]


# One row per run (`report --format csv --runs`): what a spreadsheet of runs needs.
_RUN_COLUMNS = (
    "run_id", "tier", "scenario", "run_index", "status", "passed", "impl_rate",
    "composite_score", "cost_usd", "duration_seconds", "input_tokens", "output_tokens",
    "gates_passed", "gates_total", "attempts", "worker", "fail_reason",
)  # fmt: skip


def _runs_csv(runs: list[RunResult]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*_RUN_COLUMNS, "judge_score"])
    for run in runs:
        values = [getattr(run, column) for column in _RUN_COLUMNS]
        values[_RUN_COLUMNS.index("status")] = run.status.value
        writer.writerow([*values, run.judge.weighted_score if run.judge else None])
    return out.getvalue()


# `compare --format csv`: raw numbers, as `report --format csv` writes them.
_COMPARISON_COLUMNS = (
    "runs", "passes", "reference_runs", "reference_passes", "pass_rate",
    "reference_pass_rate", "pass_rate_delta", "fisher_p", "fisher_p_adjusted",
    "composite_median", "reference_composite_median", "composite_median_delta",
    "cliffs_delta", "mann_whitney_u", "mann_whitney_p", "mann_whitney_p_adjusted",
    "prob_superior",
)  # fmt: skip


def _comparison_csv(result: ExperimentComparison) -> str:
    """One row per tier ("(all)") and tier x scenario of B against A, raw numbers."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    # The headline pass rates' Wilson intervals, as `report --format csv`'s pass_share_ci.
    intervals = ["pass_rate_ci_low", "pass_rate_ci_high"]
    intervals += ["reference_pass_rate_ci_low", "reference_pass_rate_ci_high"]
    intervals += ["pass_rate_delta_ci_low", "pass_rate_delta_ci_high"]
    intervals += ["cliffs_delta_ci_low", "cliffs_delta_ci_high"]
    writer.writerow(
        ["tier", "scenario", *_COMPARISON_COLUMNS, *intervals, "verdict", "verdict_from"]
    )
    rows = [(tier, "(all)", c) for tier, c in result.tiers.items()]
    rows += [(t, s, c) for t, cells in result.scenarios.items() for s, c in cells.items()]
    for tier, scenario, c in rows:
        values = [getattr(c, column) for column in _COMPARISON_COLUMNS]
        ends = [
            *bounds(pass_share(c.passes, c.runs)),
            *bounds(pass_share(c.reference_passes, c.reference_runs)),
            *bounds(c.risk_difference_ci),
            *bounds(c.cliffs_delta_ci),
        ]
        writer.writerow([tier, scenario, *values, *ends, c.verdict.value, c.verdict_from])
    return out.getvalue()


def _csv(report: ExperimentReport) -> str:
    """One row per tier and tier x scenario, raw numbers (no formatting), for spreadsheets."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        ["tier", "scenario", "runs", "errors", "passes", "grade", "cost_of_pass"]
        + [f"{m}_{s}" for m in _CSV_METRICS for s in ("median", "mean", "std_dev", "min", "max")]
        + ["pass_rate_ci_low", "pass_rate_ci_high"]
        + ["composite_median_ci_low", "composite_median_ci_high"]
        + ["vs_baseline_fisher_p", "vs_baseline_mann_whitney_p", "vs_baseline_verdict"]
        + [f"pass_at_{k}" for k in PASS_K]
        + [f"pass_hat_{k}" for k in PASS_K]
        + ["flaky_scenarios"]
        # Added after the first release's columns, so positions stay where they were.
        + ["counted", "cancelled", "pass_share", "pass_share_ci_low", "pass_share_ci_high"]
        + ["vs_baseline_fisher_p_adjusted", "vs_baseline_mann_whitney_p_adjusted"]
        + ["vs_baseline_risk_difference_ci_low", "vs_baseline_risk_difference_ci_high"]
        + ["vs_baseline_cliffs_delta", "cliffs_delta_ci_low", "cliffs_delta_ci_high"]
        + ["detectable_improvement", "detectable_regression", "consistency"]
        + ["not_run"]
        + scenarios.CSV_COLUMNS
    )
    for tier_id, scope, cell in formatting.cells(report):
        a = cell.analysis
        vs = a.vs_baseline
        values: list[object] = []
        for metric in _CSV_METRICS:
            st: Statistics = getattr(cell, metric)
            values += [st.median, st.mean, st.std_dev, st.min, st.max]
        for interval in (a.pass_rate_ci, a.composite_median_ci):
            values += [None, None] if interval is None else [interval.low, interval.high]
        values += [None, None, None] if vs is None else [vs.fisher_p, vs.mann_whitney_p, vs.verdict]
        values += [a.pass_at_k.get(k) for k in PASS_K] + [a.pass_hat_k.get(k) for k in PASS_K]
        values.append(";".join(a.flaky_scenarios))
        share = formatting.pass_share(cell.passes, cell.counted)
        values += [cell.counted, cell.cancelled]
        if share is None:
            values += [None, None, None]
        else:
            values += [cell.passes / cell.counted, share.low, share.high]
        values += [*_test_figures(vs), cell.consistency]
        values.append(cell.not_run)
        values += scenarios.csv_values(cell, scope == formatting.ALL)
        writer.writerow(
            [
                tier_id,
                "" if scope == formatting.ALL else scope,
                cell.runs,
                cell.errors,
                cell.passes,
                cell.grade or "",
                cell.cost_of_pass,
            ]
            + ["" if v is None else v for v in values]
        )
    return out.getvalue()


def _test_figures(c: Comparison | None) -> list[object]:
    """The corrected p-values, effect sizes and detectable differences of one test."""
    if c is None:
        return [None] * 9
    risk, cliff, detect = c.risk_difference_ci, c.cliffs_delta_ci, c.detectable
    return [
        c.fisher_p_adjusted,
        c.mann_whitney_p_adjusted,
        *((None, None) if risk is None else (risk.low, risk.high)),
        c.cliffs_delta,
        *((None, None) if cliff is None else (cliff.low, cliff.high)),
        *((None, None) if detect is None else (detect.improvement, detect.regression)),
    ]
