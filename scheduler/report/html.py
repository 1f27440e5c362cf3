"""The report as one self-contained HTML file: charts (inline SVG), the report's tables
and, given the runs, the run table with each run's evidence (scheduler.report.runs).

No script, stylesheet or font fetched from anywhere: it opens offline, in a
browser or as a CI artifact. Its only script is the run table's, inline. Nothing
is wider than the window: a table too wide for it scrolls in its own box.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from html import escape

from core.results.report import ExperimentReport, Interval, TierReport
from scheduler.report.charts import Bar, Point, Series, bar_chart, line_chart, scatter_chart
from scheduler.report.formatting import Table, pass_share
from scheduler.report.runs import RUNS_STYLE, runs_section
from scheduler.report.sections import banner, header, report_tables, scenario_tables

# An interval as the tables write it: "[0.541, 0.773]".
_INTERVAL = re.compile(r"\[[^\]]*\]")
_STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem;
       color: #222; max-width: 1400px; }
section { max-width: 100%; }
.table-scroll { max-width: 100%; overflow-x: auto; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.1rem; margin-top: 2rem; }
.charts { display: flex; flex-wrap: wrap; gap: 1.5rem; }
figure.chart { margin: 0; } figcaption { font-size: .85rem; color: #555; }
svg .axis, svg .grid, svg .whisker { stroke: #888; } svg .grid { stroke: #e4e4e4; }
svg .whisker { stroke: #222; stroke-width: 1.5; }
svg text { font-size: 11px; fill: #333; } svg .axis-label { font-size: 12px; }
table { border-collapse: collapse; margin: .5rem 0; font-size: 13px;
        font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ddd; padding: .2rem .4rem; text-align: right; }
td.label, .interval { white-space: nowrap; }
th { background: #f4f4f4; vertical-align: bottom; }
.label { text-align: left; }
ul.notes { color: #555; font-size: .85rem; }
"""


def html_report(
    report: ExperimentReport,
    scenario: str | None = None,
    evidence: Mapping[str, bytes] | None = None,
) -> str:
    """The full report, or with `scenario` the view of that scenario (its tiers side by side).
    With the report's runs (`report.runs`), the run table too (of that scenario's runs),
    each run with its `evidence` (by run id, as the store keeps it) when there is some."""
    title = header(report) + (f" — scenario {scenario}" if scenario else "")
    groups = _groups(report, scenario)
    tables = report_tables(report) if scenario is None else scenario_tables(report, scenario)
    runs, style = "", _STYLE
    if report.runs is not None:
        shown = [r for r in report.runs if scenario in (None, r.scenario)]
        runs, style = runs_section(report, shown, evidence or {}), _STYLE + RUNS_STYLE
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{style}</style></head><body>"
        + "".join(f'<p class="banner"><strong>{escape(b)}</strong></p>' for b in banner(report))
        + f"<h1>{escape(title)}</h1>"
        f'<section class="charts">{_charts(groups)}</section>'
        + "".join(_table(t) for t in tables)
        + runs
        + "</body></html>\n"
    )


def _groups(report: ExperimentReport, scenario: str | None) -> dict[str, TierReport]:
    """What the charts show per tier: the tier, or its cell of the scenario."""
    if scenario is None:
        return dict(report.tiers)
    return {t: r.scenarios[scenario] for t, r in report.tiers.items() if scenario in r.scenarios}


def _charts(groups: dict[str, TierReport]) -> str:
    pass_rate = [
        Bar(
            t,
            r.passes / r.counted if r.counted else None,
            *_bounds(pass_share(r.passes, r.counted)),
        )
        for t, r in groups.items()
    ]
    composite = [
        Bar(t, r.composite_score.median, *_bounds(r.analysis.composite_median_ci))
        for t, r in groups.items()
    ]
    cost = [
        Point(t, r.cost_usd.median, r.composite_score.median)
        for t, r in groups.items()
        if r.cost_usd.median is not None and r.composite_score.median is not None
    ]
    context = [Series(t, [s.mean for s in r.context_by_call]) for t, r in groups.items()]
    return "".join(
        [
            bar_chart(
                "pass-rate",
                "Pass rate per tier: passes / runs counted (95% Wilson interval)",
                pass_rate,
                "pass rate",
                1.0,
            ),
            bar_chart(
                "composite",
                "Median composite score per tier (95% bootstrap interval)",
                composite,
                "composite score",
                1.0,
            ),
            scatter_chart(
                "cost-composite",
                "Cost against composite score (medians per tier)",
                cost,
                "cost per run, $",
                "composite score",
                1.0,
            ),
            line_chart(
                "context-growth",
                "Context growth: mean input tokens of the i-th LLM call",
                context,
                "LLM call",
                "input tokens",
            ),
        ]
    )


def _bounds(interval: Interval | None) -> tuple[float | None, float | None]:
    return (None, None) if interval is None else (interval.low, interval.high)


def _table(table: Table) -> str:
    head = "".join(_cell("th", c, i < table.label_columns) for i, c in enumerate(table.columns))
    rows = "".join(
        "<tr>"
        + "".join(_cell("td", v, i < table.label_columns) for i, v in enumerate(row))
        + "</tr>"
        for row in table.rows
    )
    notes = "".join(f"<li>{escape(n)}</li>" for n in table.notes)
    return (
        f"<section><h2>{escape(table.title)}</h2>"
        f'<div class="table-scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{rows}</tbody></table></div>"
        + (f'<ul class="notes">{notes}</ul>' if notes else "")
        + "</section>"
    )


def _cell(tag: str, text: str, label: bool) -> str:
    if label:
        return f'<{tag} class="label">{escape(text)}</{tag}>'
    if tag == "th":
        return f"<th>{escape(text)}</th>"
    # A table wider than the page wraps its values at their spaces ("0.667" above its
    # interval), but never inside an interval "[0.541, 0.773]".
    return "<td>" + _INTERVAL.sub(r'<span class="interval">\g<0></span>', escape(text)) + "</td>"
