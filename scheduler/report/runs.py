"""The HTML report's runs: a table of every run that filters by tier, scenario and
outcome, and per run its evidence, opened on a click (README, "Reading a report").

The page must open as fast with thousands of runs as with ten, so nothing is laid
out up front: the rows travel as one compact JSON array and the page draws only
the rows in view (runs.js); each run's RunResult is a zlib-compressed, base64 JSON
blob in an inert <script> element, and its evidence another, decoded only when that
run is opened. The evidence travels as the store keeps it (its JSON, compressed by
the worker that ran the run): writing the page of 10,000 runs neither parses nor
compresses it again. Base64 also keeps a user's text from ever closing the element
it travels in.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from importlib.resources import files

from core.results.report import ExperimentReport
from core.results.run import OUTCOMES, RunResult
from core.wording import plural
from scheduler.report.brief import cut, failure_reason
from scheduler.report.formatting import duration, num

COLUMNS = ("tier", "scenario", "#", "outcome", "reason", "cost $", "duration", "judge score")
# The columns of text (left-aligned), by position.
LABELS = (0, 1, 3, 4)
# The columns with a filter, by position in a row.
FILTERS = {"tier": 0, "scenario": 1, "outcome": 3}
# Past the shown columns, a row carries the index of its failure reason (-1: none) in
# the page's list of them (brief.failure_reasons), which the reason filter selects.
REASON_GROUP = len(COLUMNS)
# A reason longer than this is cut in its row (the opened run shows all of it).
REASON_CHARS = 300
# The runs' evidence in one page, compressed: beyond it (thousands of runs near their
# evidence caps) the page would be too big to open; the rest is left out.
EVIDENCE_BUDGET_BYTES = 64_000_000
_SCRIPT = files("scheduler.report").joinpath("runs.js").read_text(encoding="utf-8")
RUNS_STYLE = files("scheduler.report").joinpath("runs.css").read_text(encoding="utf-8")


def runs_section(
    report: ExperimentReport,
    runs: Sequence[RunResult],
    evidence: Mapping[str, bytes],
    evidence_budget: int = EVIDENCE_BUDGET_BYTES,
    reasons: Sequence[str] = (),
) -> str:
    """The "Runs" section: filters, the table (drawn by its script), the blobs.
    `evidence`: each run's as the store keeps it (zlib-compressed JSON). The runs'
    evidence takes at most `evidence_budget` bytes of the page, failed runs' first;
    a run left out says where its evidence is. `reasons`: the failure reasons the
    reason filter offers, in the order the page's summary of them links to."""
    ordered = sorted(runs, key=_order(report))
    group = {reason: i for i, reason in enumerate(reasons)}
    rows = [[*_row(run), group.get(failure_reason(run) or "", -1)] for run in ordered]
    blobs = _blobs(ordered, evidence, evidence_budget)
    embedded = sum(blob.evidence is not None for blob in blobs)
    elements = "".join(
        f'<script type="application/x-evalfleet-run" id="run-{i}">{blob.text}</script>'
        + (
            ""
            if blob.evidence is None
            else f'<script type="application/x-evalfleet-evidence" id="evidence-{i}">'
            f"{blob.evidence}</script>"
        )
        for i, blob in enumerate(blobs)
    )
    left_out = sum(run.run_id in evidence for run in ordered) - embedded
    head = "".join(
        f'<th class="label">{escape(c)}</th>' if i in LABELS else f"<th>{escape(c)}</th>"
        for i, c in enumerate(COLUMNS)
    )
    return (
        '<section id="runs"><h2>Runs</h2>'
        f'<div class="run-filters">{_filters(rows)}{_reason_filter(rows, reasons)}'
        '<span id="runs-count" role="status"></span></div>'
        '<div class="runs-scroll" id="runs-scroll" tabindex="0">'
        f'<table class="runs"><thead><tr>{head}</tr></thead><tbody id="runs-body"></tbody>'
        "</table></div>"
        '<ul class="notes">'
        f"<li>{plural(len(ordered), 'run')}, {embedded} with evidence; click a run (or press "
        "Enter on it) for its gates, judge, transcript, output and attempts</li>"
        + (
            f"<li>{_left_out(left_out, evidence_budget)} `scheduler show RUN_ID` shows "
            "any run.</li>"
            if left_out
            else ""
        )
        + "</ul>"
        "<noscript><p>The run table needs JavaScript.</p></noscript>"
        '<div id="run-detail" hidden></div>'
        f'<script type="application/json" id="runs-data">{_json(rows)}</script>'
        f"{elements}<script>{_SCRIPT}</script></section>"
    )


def _order(report: ExperimentReport) -> Callable[[RunResult], tuple[int, str, int, str, int]]:
    """Runs in the matrix's order: its tiers, its scenarios, then by index."""
    tiers = {t: i for i, t in enumerate(report.experiment.tiers)}
    scenarios = {s: i for i, s in enumerate(report.experiment.scenarios)}

    def key(run: RunResult) -> tuple[int, str, int, str, int]:
        return (
            tiers.get(run.tier, len(tiers)),
            run.tier,
            scenarios.get(run.scenario, len(scenarios)),
            run.scenario,
            run.run_index,
        )

    return key


def _row(run: RunResult) -> list[str | int]:
    reason = cut((run.fail_reason or "").split("\n", 1)[0], REASON_CHARS)
    return [
        run.tier,
        run.scenario,
        run.run_index,
        run.outcome,
        reason,
        num(run.cost_usd, 4),
        duration(run.duration_seconds),
        _judge_score(run),
    ]


def _judge_score(run: RunResult) -> str:
    if run.judge is None:
        return "-"
    if run.judge.error is not None:
        return "error"
    return num(run.judge.weighted_score)


def _filters(rows: list[list[str | int]]) -> str:
    """A select per filtered column; its options are the values present, with counts."""
    out = []
    for name, column in FILTERS.items():
        counts: dict[str, int] = {}
        for row in rows:
            counts[str(row[column])] = counts.get(str(row[column]), 0) + 1
        values = [o for o in OUTCOMES if o in counts] if name == "outcome" else list(counts)
        options = "".join(
            f'<option value="{escape(v)}">{escape(v)} ({counts[v]})</option>' for v in values
        )
        out.append(
            f'<label>{name} <select data-column="{column}" name="{name}">'
            f'<option value="">all</option>{options}</select></label>'
        )
    return "".join(out)


def _reason_filter(rows: list[list[str | int]], reasons: Sequence[str]) -> str:
    counts: dict[int, int] = {}
    for row in rows:
        index = int(row[REASON_GROUP])
        counts[index] = counts.get(index, 0) + 1
    options = "".join(
        f'<option value="{i}">{escape(cut(reason, 80))} ({counts[i]})</option>'
        for i, reason in enumerate(reasons)
        if i in counts
    )
    return (
        f'<label>failure reason <select data-column="{REASON_GROUP}" name="reason">'
        f'<option value="">all</option>{options}</select></label>'
    )


@dataclass(frozen=True)
class _Blob:
    text: str  # base64 of the zlib-compressed {"run": RunResult, "note": ...}
    evidence: str | None  # base64 of the run's stored evidence, when the page holds it


def _blobs(runs: Sequence[RunResult], evidence: Mapping[str, bytes], budget: int) -> list[_Blob]:
    """Each run's details, with its evidence while the budget lasts: failed runs first
    (the ones a reader opens), then the rest in order."""
    blobs: dict[int, _Blob] = {}
    spent = 0
    for i in sorted(range(len(runs)), key=lambda i: runs[i].passed):
        run = runs[i]
        found = evidence.get(run.run_id)
        # Base64 makes 4 bytes of every 3.
        if found is not None and spent + len(found) * 4 // 3 > budget:
            note = f"{_left_out(1, budget)} `scheduler show {run.run_id}` shows it."
            blobs[i] = _Blob(_details(run, note), None)
            continue
        if found is not None:
            spent += len(found) * 4 // 3
        blobs[i] = _Blob(_details(run), None if found is None else _base64(found))
    return [blobs[i] for i in range(len(runs))]


def _left_out(count: int, budget: int) -> str:
    whose = "This run's evidence was" if count == 1 else f"{count} runs' evidence was"
    return (
        f"{whose} left out of this page: it holds at most {budget / 1e6:g} MB of "
        "evidence, failed runs' first."
    )


def _details(run: RunResult, note: str | None = None) -> str:
    details = f'{{"run":{run.model_dump_json()},"note":{json.dumps(note)}}}'
    # Level 1: a report of thousands of runs is written in a fraction of the time of the
    # default level, for a page a few percent larger.
    return _base64(zlib.compress(details.encode(), 1))


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _json(value: object) -> str:
    """JSON that cannot end its <script> element: every `<` escaped."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
