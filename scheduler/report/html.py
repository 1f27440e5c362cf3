"""The report as one self-contained HTML file: charts (inline SVG), the report's tables
and, given the runs, the run table with each run's evidence (scheduler.report.runs).

No script, stylesheet or font fetched from anywhere: it opens offline, in a
browser or as a CI artifact. Its only script is the run table's, inline. Nothing
is wider than the window: a table too wide for it scrolls in its own box.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from html import escape

from core.results.report import ExperimentReport, Interval, NoInterval, TierReport
from core.wording import plural
from scheduler.report.brief import cut, failure_reasons, verdict_table
from scheduler.report.charts import (
    Bar,
    Estimate,
    Point,
    Series,
    bar_chart,
    interval_chart,
    line_chart,
    scatter_chart,
)
from scheduler.report.formatting import Table, bounds, p_value, pass_share
from scheduler.report.runs import RUNS_STYLE, runs_section
from scheduler.report.sections import banner, header, report_tables, scenario_tables
from scheduler.report.verdicts import (
    COMPOSITE_MEASURE,
    PASS_RATE_MEASURE,
    Difference,
    verdict_difference,
)

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
svg .whisker { stroke: #222; stroke-width: 1.5; } svg .zero { stroke: #888; stroke-dasharray: 3 3; }
svg text { font-size: 11px; fill: #333; } svg .axis-label { font-size: 12px; }
table { border-collapse: collapse; margin: .5rem 0; font-size: 13px;
        font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ddd; padding: .2rem .4rem; text-align: right; }
td.label, .interval { white-space: nowrap; }
th { background: #f4f4f4; vertical-align: bottom; }
.label { text-align: left; }
ul.notes { color: #555; font-size: .85rem; }
nav#contents ol { columns: 2 22rem; margin: .3rem 0; }
nav#contents h2 { margin-top: 1rem; }
"""


def html_report(
    report: ExperimentReport,
    scenario: str | None = None,
    evidence: Mapping[str, bytes] | None = None,
) -> str:
    """The full report, opening with the verdicts (_lead), or with `scenario` the view of
    that scenario (its tiers side by side). With the report's runs (`report.runs`), the
    run table too (of that scenario's runs), each run with its `evidence` (by run id, as
    the store keeps it) when there is some."""
    title = header(report) + (f" — scenario {scenario}" if scenario else "")
    groups = _groups(report, scenario)
    tables = report_tables(report) if scenario is None else scenario_tables(report, scenario)
    ids = _ids([t.title for t in tables])
    contents = [("charts", "Charts"), *zip(ids, (t.title for t in tables), strict=True)]
    failures, runs, style = "", "", _STYLE
    if report.runs is not None:
        shown = [r for r in report.runs if scenario in (None, r.scenario)]
        reasons = failure_reasons(shown)
        failures = _failures(reasons, len(shown))
        runs = runs_section(report, shown, evidence or {}, reasons=[r for r, _, _ in reasons])
        style = _STYLE + RUNS_STYLE
        contents = [
            (
                "failure-reasons",
                f"Failure reasons ({plural(sum(n for _, n, _ in reasons), 'run')})",
            ),
            ("runs", f"Runs ({len(shown)}): every run with its evidence"),
            *contents,
        ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{style}</style></head><body>"
        + "".join(f'<p class="banner"><strong>{escape(b)}</strong></p>' for b in banner(report))
        + f"<h1>{escape(title)}</h1>"
        + (_lead(report) if scenario is None else "")
        + _contents(contents)
        + failures
        + f'<section class="charts" id="charts">{_charts(groups)}</section>'
        + "".join(_table(t, i) for t, i in zip(tables, ids, strict=True))
        + runs
        + "</body></html>\n"
    )


# The sections the page names itself; a table's anchor never takes one of these.
_OWN_IDS = (
    "verdict",
    "difference",
    "per-scenario",
    "charts",
    "runs",
    "failure-reasons",
    "contents",
)


def _ids(titles: list[str]) -> list[str]:
    """An anchor per section, from its title ("Seed metrics: T1" -> seed-metrics-t1)."""
    ids: list[str] = []
    for title in titles:
        base = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section"
        found, n = base, 2
        while found in ids or found in _OWN_IDS:
            found, n = f"{base}-{n}", n + 1
        ids.append(found)
    return ids


def _contents(entries: list[tuple[str, str]]) -> str:
    links = "".join(f'<li><a href="#{i}">{escape(title)}</a></li>' for i, title in entries)
    return f'<nav id="contents" aria-label="Contents"><h2>Contents</h2><ol>{links}</ol></nav>'


# Reasons listed in the page's summary; the run table's reason filter offers them all.
MOST_FAILURES_SHOWN = 10


def _failures(reasons: list[tuple[str, int, str]], runs: int) -> str:
    """The most common failure reasons; a click on one shows its runs in the run table."""
    rows = "".join(
        f'<tr><td>{n}</td><td class="label"><a href="#runs" class="reason-filter" '
        f'data-reason="{i}">{escape(cut(reason))}</a></td></tr>'
        for i, (reason, n, _) in enumerate(reasons[:MOST_FAILURES_SHOWN])
    )
    more = len(reasons) - MOST_FAILURES_SHOWN
    notes = (
        [f"of {plural(runs, 'run')}; click a reason for its runs in the run table"] if rows else []
    )
    if more > 0:
        notes.append(
            f"and {plural(more, 'other reason')}: the run table's reason filter has them all"
        )
    body = (
        f'<div class="table-scroll"><table><thead><tr><th>runs</th><th class="label">reason'
        f"</th></tr></thead><tbody>{rows}</tbody></table></div>"
        if rows
        else ""
    )
    return (
        '<section id="failure-reasons"><h2>Most common failure reasons</h2>'
        + (body or "<p>No run failed.</p>")
        + '<ul class="notes">'
        + "".join(f"<li>{escape(n)}</li>" for n in notes)
        + "</ul></section>"
    )


def _lead(report: ExperimentReport) -> str:
    """What the page opens with: the verdict per tier (the terminal's own table), each
    tier's difference in pass rate from the baseline, as the tests its verdict came
    from take it (and, where the verdict was read from the composite score alone, saying
    so), then each scenario's pass rate per tier."""
    return (
        _table(verdict_table(report), "verdict")
        + f'<section class="charts" id="difference">{_difference_chart(report)}</section>'
        + '<section id="per-scenario"><h2>Pass rate per scenario</h2><div class="charts">'
        + "".join(_scenario_charts(report))
        + "</div></section>"
    )


def _difference_chart(report: ExperimentReport) -> str:
    rows, bases, elsewhere = [], [], []
    for tier_id, tier in report.tiers.items():
        found = verdict_difference(tier, report.multiplicity, report.multiplicity_across_scenarios)
        if found is None:
            continue
        rate_test, score_test = found.tests[PASS_RATE_MEASURE], found.tests[COMPOSITE_MEASURE]
        if found.read_from == (COMPOSITE_MEASURE,):
            elsewhere.append(tier_id)
            said = (
                f"its verdict ({found.verdict.value}) is read from its composite score by "
                f"{score_test}, not from this difference: {rate_test} is not significant"
            )
        else:
            said = f"its verdict ({found.verdict.value}) comes from {rate_test} and {score_test}"
        bases.append(f"{tier_id}: {found.basis}; {said}, {found.family}{_at_odds(found)}")
        ci = found.interval
        if isinstance(ci, Interval):
            rows.append(Estimate(tier_id, found.value, ci.low, ci.high))
        elif found.value is None:
            rows.append(Estimate(tier_id, None))
        else:
            why = ci.not_reported if isinstance(ci, NoInterval) else "none was computed"
            rows.append(Estimate(tier_id, found.value, no_interval=why))
    # Symmetric about 0, as wide as the largest figure needs (a difference of pass
    # rates is within [-1, 1]).
    reach = max([abs(v) for r in rows for v in (r.value, r.low, r.high) if v is not None] or [1.0])
    bound = min(1.0, max(0.25, math.ceil(reach * 4) / 4))
    title = (
        f"Each tier's difference in pass rate from the baseline ({report.cross_tier.baseline}), "
        "as its verdict's tests take it, with a 95% interval not adjusted for multiple "
        "tests: a verdict is read from its tests' adjusted p-values (below), not from the "
        "interval"
    )
    if elsewhere:
        title += (
            f"; the verdict of {', '.join(elsewhere)} is read from the composite score "
            "instead (below)"
        )
    return interval_chart(
        "difference", title, rows, "difference in pass rate", (-bound, bound), notes=bases
    )


def _at_odds(found: Difference) -> str:
    """Where the interval drawn and the verdict's test of the pass rate disagree (an
    interval clear of 0 beside a test that is not significant once corrected, or the other
    way round), why: without it the chart reads as contradicting the verdict."""
    ci = found.interval
    if not isinstance(ci, Interval):
        return ""
    clear = ci.low > 0 or ci.high < 0
    if clear == (PASS_RATE_MEASURE in found.read_from):
        return ""
    test = found.tests[PASS_RATE_MEASURE]
    adjusted = f"{test.name}'s adjusted p, {p_value(test.adjusted)},"
    seen = (
        f"the interval leaves out 0, yet {adjusted} is not significant"
        if clear
        else f"the interval holds 0, yet {adjusted} is significant"
    )
    return (
        f"; {seen}: the interval is neither adjusted for the family's tests nor the test's "
        "own, and the verdict is the test's"
    )


def _scenario_charts(report: ExperimentReport) -> list[str]:
    scenarios = list(dict.fromkeys(s for t in report.tiers.values() for s in t.scenarios))
    charts = []
    for n, scenario in enumerate(scenarios):
        rows = []
        for tier_id, tier in report.tiers.items():
            cell = tier.scenarios.get(scenario)
            if cell is None:
                continue
            low, high = bounds(pass_share(cell.passes, cell.counted))
            value = cell.passes / cell.counted if cell.counted else None
            rows.append(Estimate(tier_id, value, low, high))
        charts.append(
            interval_chart(
                f"scenario-{n}",
                f"{scenario}: pass rate per tier (95% Wilson interval)",
                rows,
                "pass rate",
                (0.0, 1.0),
                width=SCENARIO_CHART_WIDTH,
            )
        )
    return charts


# Narrow enough for two or three scenarios' charts side by side.
SCENARIO_CHART_WIDTH = 380


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
            *bounds(pass_share(r.passes, r.counted)),
        )
        for t, r in groups.items()
    ]
    composite = [
        Bar(t, r.composite_score.median, *bounds(r.analysis.composite_median_ci))
        for t, r in groups.items()
    ]
    cost = [
        Point(t, r.cost_usd.median, r.composite_score.median)
        for t, r in groups.items()
        if r.cost_usd.median is not None and r.composite_score.median is not None
    ]
    unplotted = [
        f"{t}: " + ("no run counted" if not r.counted else "cost unknown")
        for t, r in groups.items()
        if r.cost_usd.median is None or r.composite_score.median is None
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
                [f"not shown: {'; '.join(unplotted)}"] if unplotted else [],
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


def _table(table: Table, anchor: str) -> str:
    head = "".join(_cell("th", c, i < table.label_columns) for i, c in enumerate(table.columns))
    rows = "".join(
        "<tr>"
        + "".join(_cell("td", v, i < table.label_columns) for i, v in enumerate(row))
        + "</tr>"
        for row in table.rows
    )
    notes = "".join(f"<li>{escape(n)}</li>" for n in table.notes)
    return (
        f'<section id="{anchor}"><h2>{escape(table.title)}</h2>'
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
