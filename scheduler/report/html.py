"""The report as one self-contained HTML file: charts (inline SVG) and the report's tables.

No script, no stylesheet or font fetched from anywhere: it opens offline, in
a browser or as a CI artifact.
"""

from __future__ import annotations

from html import escape

from core.report_models import ExperimentReport, Interval, TierReport
from scheduler.report.charts import Bar, Point, Series, bar_chart, line_chart, scatter_chart
from scheduler.report.sections import (
    Table,
    banner,
    header,
    pass_share,
    report_tables,
    scenario_tables,
)

_STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem;
       color: #222; max-width: 1400px; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.1rem; margin-top: 2rem; }
.charts { display: flex; flex-wrap: wrap; gap: 1.5rem; }
figure.chart { margin: 0; } figcaption { font-size: .85rem; color: #555; }
svg .axis, svg .grid, svg .whisker { stroke: #888; } svg .grid { stroke: #e4e4e4; }
svg .whisker { stroke: #222; stroke-width: 1.5; }
svg text { font-size: 11px; fill: #333; } svg .axis-label { font-size: 12px; }
table { border-collapse: collapse; margin: .5rem 0; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ddd; padding: .25rem .5rem; text-align: right; white-space: nowrap; }
th { background: #f4f4f4; white-space: normal; vertical-align: bottom; }
.label { text-align: left; }
ul.notes { color: #555; font-size: .85rem; }
"""


def html_report(report: ExperimentReport, scenario: str | None = None) -> str:
    """The full report, or with `scenario` the view of that scenario (its tiers side by side)."""
    title = header(report) + (f" — scenario {scenario}" if scenario else "")
    groups = _groups(report, scenario)
    tables = report_tables(report) if scenario is None else scenario_tables(report, scenario)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>"
        + "".join(f'<p class="banner"><strong>{escape(b)}</strong></p>' for b in banner(report))
        + f"<h1>{escape(title)}</h1>"
        f'<section class="charts">{_charts(groups)}</section>'
        + "".join(_table(t) for t in tables)
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
        f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
        + (f'<ul class="notes">{notes}</ul>' if notes else "")
        + "</section>"
    )


def _cell(tag: str, text: str, label: bool) -> str:
    css = ' class="label"' if label else ""
    return f"<{tag}{css}>{escape(text)}</{tag}>"
