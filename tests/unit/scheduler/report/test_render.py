"""Rendering details the CLI tests do not reach: escaping, empty experiments, chart scales."""

from __future__ import annotations

import base64
import json
import os
import re
import zlib

from core.analysis.aggregate import ReportSettings, aggregate
from core.evidence.models import Excerpt, RunEvidence
from core.matrix import Scoring
from core.results.report import ExperimentInfo, ExperimentReport
from core.results.run import RunResult, RunStatus
from scheduler.report.charts import Bar, bar_chart, line_chart
from scheduler.report.render import render
from scheduler.report.runs import runs_section
from tests.support.html_pages import run_details

HOSTILE = 'x <script>alert("1")</script> | & y'


def _report(runs: list[RunResult], name: str = HOSTILE) -> ExperimentReport:
    info = ExperimentInfo(id="e1", name=name, created_at=0.0, tiers=["T0", "T1"], scenarios=["s"])
    return aggregate(info, runs, ReportSettings(baseline="T0", scoring=Scoring()))


def _stored(evidence: RunEvidence) -> bytes:
    """Evidence as the store keeps it (Evidence.save)."""
    return zlib.compress(evidence.model_dump_json().encode(), 6)


def _run(tier: str, index: int, passed: bool) -> RunResult:
    return RunResult(
        experiment_id="e1",
        run_id=f"{tier}-{index}",
        tier=tier,
        scenario="s",
        run_index=index,
        status=RunStatus.completed,
        passed=passed,
        pass_rate=float(passed),
        composite_score=0.9 if passed else 0.1,
    )


def test_user_text_is_escaped_in_html_and_markdown() -> None:
    report = _report([_run("T0", 0, True), _run("T1", 0, False)])
    page = render(report, "html")
    assert "<script" not in page
    assert "x &lt;script&gt;alert(&quot;1&quot;)&lt;/script&gt; | &amp; y" in page
    markdown = render(report, "markdown")
    assert "<script" not in markdown
    title = markdown.splitlines()[0]
    assert title.startswith("# x &lt;script>alert") and "\\| & y" in title
    github = render(report, "github")
    assert "<script" not in github and "x &lt;script>alert" in github.splitlines()[2]
    assert "<details>" not in github  # one scenario: its rows are the tiers'


def test_run_text_cannot_break_out_of_the_run_table() -> None:
    """A run's reason and evidence are a user's (an agent's) text: in the page they are
    data the script reads, never markup."""
    failed = _run("T1", 0, False).model_copy(update={"fail_reason": HOSTILE})
    report = _report([_run("T0", 0, True), failed]).model_copy(
        update={"runs": [_run("T0", 0, True), failed]}
    )
    evidence = RunEvidence(
        experiment_id="e1", run_id=failed.run_id, stderr=Excerpt(text=HOSTILE, total_bytes=30)
    )
    page = render(report, "html", evidence={failed.run_id: _stored(evidence)})

    assert "<script>alert" not in page
    # The run table's own script, its rows and one element per run: nothing else.
    assert re.findall(r"<script[^>]*>", page) == [
        '<script type="application/json" id="runs-data">',
        '<script type="application/x-evalfleet-run" id="run-0">',
        '<script type="application/x-evalfleet-run" id="run-1">',
        '<script type="application/x-evalfleet-evidence" id="evidence-1">',
        "<script>",
    ]
    rows = re.search(r'id="runs-data">(.*?)</script>', page)
    assert rows and json.loads(rows.group(1))[1][4] == HOSTILE
    details = run_details(page)[1]
    assert details["run"]["fail_reason"] == HOSTILE
    assert details["evidence"]["stderr"]["text"] == HOSTILE


def test_a_page_holds_evidence_up_to_its_budget_failed_runs_first() -> None:
    """Thousands of runs near their evidence caps would make a page no browser opens:
    beyond its budget a run's evidence is left out, and the run says where it is."""
    runs = [_run("T0", 0, True), _run("T0", 1, False), _run("T0", 2, True)]
    report = _report(runs)
    # Incompressible: each run's evidence takes some 40 KB of the page.
    evidence = {
        r.run_id: RunEvidence(
            experiment_id="e1",
            run_id=r.run_id,
            stdout=Excerpt(text=base64.b64encode(os.urandom(30_000)).decode(), total_bytes=40_000),
        )
        for r in runs
    }
    stored = {run_id: _stored(e) for run_id, e in evidence.items()}
    # Room for one run's: the failed one, though the passing run 0 comes first.
    page = runs_section(report, runs, stored, evidence_budget=60_000)

    failed, passed = run_details(page)[1], run_details(page)[0]
    assert failed["evidence"]["stdout"]["text"] == evidence["T0-1"].stdout.text
    assert failed["note"] is None
    assert passed["evidence"] is None and run_details(page)[2]["evidence"] is None
    assert passed["note"] == (
        "This run's evidence was left out of this page: it holds at most 0.06 MB of evidence, "
        "failed runs' first. `scheduler show T0-0` shows it."
    )
    assert "3 runs, 1 with evidence" in page
    assert "2 runs' evidence was left out of this page" in page


def test_an_experiment_without_results_renders_everywhere() -> None:
    report = _report([])
    page = render(report, "html")
    # The difference from the baseline, its one scenario's and the four charts after them.
    assert page.count("no data") == 1 + 1 + 4
    for fmt in ("markdown", "table", "csv", "json", "github"):
        assert "T1" in render(report, fmt)
    assert render(report, "github").startswith(
        "**⚪ Against baseline T0: T1 not enough runs** "
        "(Holm-corrected across the 0 run-level tests"
    )


def test_github_format_of_a_lone_tier_says_there_is_nothing_to_compare() -> None:
    info = ExperimentInfo(id="e1", name="n", created_at=0.0, tiers=["T0"], scenarios=["s"])
    report = aggregate(
        info, [_run("T0", 0, True)], ReportSettings(baseline="T0", scoring=Scoring())
    )
    first = render(report, "github").splitlines()[0]
    assert first == "**⚪ T0 is the only tier: no test against a baseline**"


def test_bar_heights_follow_the_values_and_the_axis_has_round_ticks() -> None:
    chart = bar_chart("c", "t", [Bar("a", 0.25, 0.1, 0.4), Bar("b", 1.0)], "y", 1.0)
    heights = [float(h) for h in re.findall(r'class="bar"[^>]*height="([\d.]+)"', chart)]
    assert heights[1] / heights[0] == 4
    assert re.findall(r'text-anchor="end">([\d.]+)<', chart) == [
        "0",
        "0.2",
        "0.4",
        "0.6",
        "0.8",
        "1",
    ]
    assert chart.count('class="error-bar"') == 1  # b has no interval
    lines = line_chart("l", "t", [], "x", "y")
    assert "no data" in lines


def test_narrow_tables_fit_and_cut_nothing() -> None:
    runs = [_run(t, i, i < p) for t, p in (("T0", 3), ("T1", 7)) for i in range(10)]
    report = _report(runs, name="narrow")
    for width in (40, 60, 90):
        text = render(report, "table", width=width)
        assert max(len(line) for line in text.splitlines()) <= width
        assert "…" not in text
        assert "0.700 [0.397, 0.892]" in text  # T1: 7 of 10


def test_the_interval_of_a_difference_is_signed_in_every_format() -> None:
    """Δ pass rate 5/5 against 0/5: its Newcombe interval reads as the delta beside it
    does (+1.000 [+0.386, +1.000]), in the table and markdown as in github."""
    runs = [_run("T0", i, False) for i in range(5)] + [_run("T1", i, True) for i in range(5)]
    report = _report(runs, name="signed")
    for fmt in ("markdown", "github", "table"):
        assert "[+0.386, +1.000]" in render(report, fmt), fmt


def test_a_judge_share_above_1_is_explained() -> None:
    """Runs whose transcripts are identical share their cached judgments: their scores
    do not vary, and the judge's noise exceeds the spread between runs."""
    from core.results.report import JudgeSummary, TierJudgeNoise

    report = _report([_run("T0", i, True) for i in range(3)], name="share")
    noise = TierJudgeNoise(
        judged_runs=3, repeats=3, judge_variance=0.003, judge_sd_of_mean=0.03,
        run_variance=0.00002, judge_share=50.0,
    )  # fmt: skip
    shown = render(
        report.model_copy(update={"judge": JudgeSummary(tiers={"T0": noise})}), "markdown"
    )
    assert "judge share above 1 (T0): the runs' scores vary less than the judge alone" in shown
    assert "runs with the same transcript get the same judgments from the judgment cache" in shown


def test_durations_under_a_second_are_in_milliseconds() -> None:
    runs = [
        _run("T0", 0, True).model_copy(update={"duration_seconds": 0.0123}),
        _run("T1", 0, True).model_copy(update={"duration_seconds": 1.26}),
    ]
    summary = render(_report(runs), "markdown").split("## Summary")[1].split("##")[0]
    cells = [line.split(" | ") for line in summary.splitlines() if "| (all) |" in line]
    rows = {row[0].lstrip("| "): row[-1].rstrip(" |") for row in cells}
    assert rows == {"T0": "12 ms", "T1": "1.3 s"}
    assert "| duration (median) |" in summary


def test_the_failure_reasons_title_counts_its_runs_in_words() -> None:
    def titled(runs: list[RunResult]) -> str:
        report = _report(runs, "n").model_copy(update={"runs": runs})
        shown = render(report, "table", width=120, full=False)
        return next(line for line in shown.splitlines() if "Most common failure reasons" in line)

    assert "(1 run failed)" in titled([_run("T0", 0, True), _run("T1", 0, False)])
    assert "(2 runs failed)" in titled([_run("T0", 0, False), _run("T1", 0, False)])
    assert "failed)" not in titled([_run("T0", 0, True), _run("T1", 0, True)])


def test_a_table_title_wraps_at_the_terminal_not_at_its_narrower_table() -> None:
    """A table carried on below in a second, narrower block: its "(continued)" title
    is one line where the terminal has the room (rich wrapped it at the block's width),
    and no title line ends in padding."""
    runs = [_run(t, i, i < p) for t, p in (("T0", 3), ("T1", 7)) for i in range(10)]
    text = render(_report(runs, name="wide"), "table", width=100)
    lines = text.splitlines()
    assert "Confidence and significance against the baseline (T0) (continued)" in lines, (
        text
    )  # carried on at 100 columns in a block narrower than its title
    titles = [line for line in lines if line.startswith(("Summary", "Confidence"))]
    assert titles and all(line == line.rstrip() for line in titles)
