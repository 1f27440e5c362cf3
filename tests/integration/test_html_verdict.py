"""The HTML report leads with the verdict: the terminal's verdict table, then each
tier's difference from the baseline with the interval its verdict's tests take, then
each scenario's pass rate per tier, for an experiment run through `scheduler submit`
(3 tiers x 3 scenarios), and as headless Chromium lays it out."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
from scipy import stats

from core.analysis.scenarios import NO_SPREAD_STRATIFIED
from core.store import Store
from tests.conftest import PREFIX, StartWorker, run_cli
from tests.support.experiments import Cell, seed_experiment
from tests.support.html_pages import rendered_json
from tests.support.terminal import table_row

pytestmark = pytest.mark.integration

RUNS = 4
# The charts' data attributes carry six significant digits.
SHOWN = 1e-5
# T0 fails every run; T1 passes some runs of each scenario (an interval); T2 passes
# every run: against T0 each scenario is all passes on one side and all failures on
# the other, so the stratified difference (1) has no spread to put an interval on.
AGENT = (
    'case "$EVALFLEET_TIER:$EVALFLEET_SCENARIO:$EVALFLEET_RUN_INDEX" in '
    "T1:a:0|T1:a:2|T1:b:*|T1:c:0|T2:*) echo ok > out.txt ;; "
    "esac; true"
)
PASSES = {
    "T0": dict.fromkeys("abc", 0),
    "T1": {"a": 2, "b": 4, "c": 1},
    "T2": dict.fromkeys("abc", 4),
}


@pytest.fixture
def experiment(fleet_env: dict[str, str], start_worker: StartWorker, tmp_path: Path) -> str:
    gate = {"type": "file_exists", "path": "out.txt"}
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        json.dumps(
            {
                "name": "html-verdict",
                "runs_per_tier": RUNS,
                "agent": {"kind": "command", "command": AGENT, "timeout_s": 60},
                "tiers": [{"id": t} for t in PASSES],
                "scenarios": [
                    {"id": s, "prompt": "write out.txt", "evaluation": {"gates": [gate]}}
                    for s in "abc"
                ],
            }
        )
    )
    start_worker(concurrency=2)
    submitted = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert submitted.returncode == 0, submitted.stderr
    return str(json.loads(submitted.stdout)["experiment"]["id"])


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def _figure(page: str, chart_id: str) -> str:
    found = re.search(f'<figure class="chart" id="{chart_id}">(.*?)</figure>', page, re.DOTALL)
    assert found, f"no chart {chart_id}"
    return found.group(1)


def _estimates(figure: str) -> dict[str, float]:
    return {
        label: float(value)
        for label, value in re.findall(
            r'<circle class="estimate" data-label="([^"]+)" data-value="([^"]+)"', figure
        )
    }


def _intervals(figure: str) -> dict[str, tuple[float, float]]:
    return {
        label: (float(low), float(high))
        for label, low, high in re.findall(
            r'<g class="interval" data-label="([^"]+)" data-low="([^"]+)" data-high="([^"]+)"',
            figure,
        )
    }


def _flat(intervals: dict[str, tuple[float, float]]) -> dict[tuple[str, str], float]:
    """Bounds by (label, "low" / "high"): what pytest.approx compares."""
    return {(k, "low"): low for k, (low, _) in intervals.items()} | {
        (k, "high"): high for k, (_, high) in intervals.items()
    }


# Appended by the test: where Chromium drew each chart's intervals and points against
# its axis, and the order of the page's first sections.
_MEASURE = """<script>
const box = el => el.getBoundingClientRect();
const read = {
  width: document.documentElement.scrollWidth,
  order: [...document.querySelectorAll("body > section, body > nav")].slice(0, 4).map(
    el => el.id),
  charts: [...document.querySelectorAll("figure.chart")].filter(
    fig => fig.querySelector(".estimate")).map(fig => {
    const axis = box(fig.querySelector("line.axis"));
    return {
      id: fig.id, axis: [axis.left, axis.right], svg: box(fig.querySelector("svg")).width,
      intervals: [...fig.querySelectorAll("g.interval")].map(g => [box(g).left, box(g).right]),
      points: [...fig.querySelectorAll("circle.estimate")].map(
        c => (box(c).left + box(c).right) / 2),
    };
  }),
};
const out = document.createElement("pre");
out.id = "measured";
out.textContent = JSON.stringify(read);
document.body.appendChild(out);
</script>"""


def test_the_html_report_opens_with_verdicts_the_difference_and_each_scenario(
    experiment: str, fleet_env: dict[str, str], tmp_path: Path
) -> None:
    page = run_cli("report", experiment, "--format", "html", env=fleet_env).stdout
    report = json.loads(run_cli("report", experiment, "--format", "json", env=fleet_env).stdout)
    terminal = run_cli("report", experiment, env={**fleet_env, "COLUMNS": "200"}).stdout

    # In this order, right under the title: nothing comes between.
    body = page.split("</h1>", 1)[1]
    starts = [body.index(f'id="{i}"') for i in ("verdict", "difference", "per-scenario")]
    assert body.startswith('<section id="verdict">') and starts == sorted(starts)
    assert starts[-1] < body.index('id="contents"') < body.index('id="charts"')

    # The verdict table: the terminal's rows and notes, cell for cell.
    verdict = body[: starts[1]]
    rows = [
        [_text(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", verdict.split("<tbody>")[1])
    ]
    assert rows == [table_row(terminal, tier) for tier in PASSES]
    assert [r[1] for r in rows] == ["baseline", "better", "better"]
    notes = [_text(n) for n in re.findall(r"<li>(.*?)</li>", verdict)]
    assert notes and all(f"- {n}" in " ".join(terminal.split()) for n in notes)

    # Each tier's difference, the one its verdict came from: the stratified one here.
    difference = _figure(page, "difference")
    t1 = report["tiers"]["T1"]["analysis"]["across_scenarios"]["these_scenarios"]
    t2 = report["tiers"]["T2"]["analysis"]["across_scenarios"]["these_scenarios"]
    assert _estimates(difference) == pytest.approx(
        {"T1": t1["risk_difference"], "T2": t2["risk_difference"]}, abs=SHOWN
    )
    ci = t1["risk_difference_ci"]
    assert _flat(_intervals(difference)) == pytest.approx(
        _flat({"T1": (ci["low"], ci["high"])}), abs=SHOWN
    )
    assert ci["low"] < t1["risk_difference"] < ci["high"]
    # T2's has none: the point is drawn and the chart says why, no interval made up.
    assert t2["risk_difference_ci"] == {"not_reported": NO_SPREAD_STRATIFIED}
    caption = " ".join(_text(difference.split("<figcaption>")[1]).split())
    assert f"T2: no interval: {NO_SPREAD_STRATIFIED}" in caption
    assert "T1: across-scenario: Mantel-Haenszel risk difference on these 3 scenarios" in caption
    assert "no interval (see below)" in difference

    # One chart per scenario, in the matrix's order: each tier's pass rate and Wilson interval.
    for n, scenario in enumerate("abc"):
        chart = _figure(page, f"scenario-{n}")
        assert f"<figcaption>{scenario}: pass rate per tier" in chart
        assert _estimates(chart) == {t: p[scenario] / RUNS for t, p in PASSES.items()}
        wilson = {
            t: stats.binomtest(p[scenario], RUNS).proportion_ci(method="wilson")
            for t, p in PASSES.items()
        }
        assert _flat(_intervals(chart)) == pytest.approx(
            _flat({t: (w.low, w.high) for t, w in wilson.items()}), abs=SHOWN
        )
    # Every interval drawn holds its value, within the range its chart spans.
    for chart_id in ("difference", "scenario-0", "scenario-1", "scenario-2"):
        figure = _figure(page, chart_id)
        lowest = -1.0 if chart_id == "difference" else 0.0
        for label, (low, high) in _intervals(figure).items():
            assert lowest <= low <= _estimates(figure)[label] <= high <= 1.0

    measured: dict[str, Any] = rendered_json(page, _MEASURE, "measured", tmp_path)
    assert measured["order"] == ["verdict", "difference", "per-scenario", "contents"]
    assert measured["width"] <= 1280
    charts = {c["id"]: c for c in measured["charts"]}
    assert {"difference", "scenario-0", "scenario-1", "scenario-2"} <= set(charts)
    for chart in charts.values():
        left, right = chart["axis"]
        assert chart["svg"] > 300 and right - left > 150, chart
        # Whiskers and points within the axis, as Chromium laid them out.
        assert all(left - 1 <= a and b <= right + 1 for a, b in chart["intervals"]), chart
        assert all(left - 1 <= x <= right + 1 for x in chart["points"]), chart
    assert len(charts["difference"]["intervals"]) == 1 and len(charts["difference"]["points"]) == 2


def test_a_verdict_read_from_the_composite_score_is_named_under_the_difference(
    redis_url: str, fleet_env: dict[str, str], tmp_path: Path
) -> None:
    """T1 passes as often as the baseline in each scenario, but its failed runs get
    further (a higher composite score): its verdict, better, comes from van Elteren's
    test on composite scores, not from the difference in pass rate the chart draws.
    The caption and T1's note say so; T2, better on both, keeps "the one its verdict is
    read from"."""
    store = Store.from_url(redis_url, prefix=PREFIX)
    runs = 20
    passed = tuple(i < 5 for i in range(runs))
    impls = {
        "T0": tuple(1.0 if p else 0.01 * i for i, p in enumerate(passed)),
        "T1": tuple(1.0 if p else 0.8 + 0.01 * i for i, p in enumerate(passed)),
        "T2": (1.0,) * runs,
    }
    cells = {
        (t, s): Cell((True,) * runs if t == "T2" else passed, impls=impls[t])
        for t in impls
        for s in ("a", "b")
    }
    exp_id = seed_experiment(store, tmp_path, cells)
    report = json.loads(run_cli("report", exp_id, "--format", "json", env=fleet_env).stdout)
    t1 = report["tiers"]["T1"]["analysis"]
    these = t1["across_scenarios"]["these_scenarios"]
    assert t1["vs_baseline"]["verdict"] == "better"
    assert these["risk_difference"] == 0.0 and these["cmh_p_adjusted"] == pytest.approx(1.0)
    assert these["van_elteren_p_adjusted"] < 0.001

    page = run_cli("report", exp_id, "--format", "html", env=fleet_env).stdout
    figure = _figure(page, "difference")
    title = " ".join(_text(figure.split("<figcaption>")[1].split("</figcaption>")[0]).split())
    assert title.startswith(
        "Each tier's difference in pass rate from the baseline (T0), as its verdict's tests "
        "take it, with a 95% interval not adjusted for multiple tests"
    ), title
    assert "the verdict of T1 is read from the composite score instead (below)" in title
    assert "the one its verdict is read from" not in title
    caption = " ".join(_text(figure.split("<figcaption>")[1]).split())
    assert (
        "T1: across-scenario: Mantel-Haenszel risk difference on these 2 scenarios (Sato's "
        "interval); its verdict (better) is read from its composite score by van Elteren (p "
        "<0.001, adj. <0.001), not from this difference: CMH (p 1.000, adj. 1.000) is not "
        "significant, Holm-corrected across the 8 across-scenario tests"
    ) in caption
    assert (
        "T2: across-scenario: Mantel-Haenszel risk difference on these 2 scenarios (Sato's "
        "interval); its verdict (better) comes from CMH"
    ) in caption
    assert caption.count("is read from its composite score") == 1


def test_an_interval_clear_of_0_beside_no_significant_difference_is_labelled(
    redis_url: str, fleet_env: dict[str, str], tmp_path: Path
) -> None:
    """One run per tier x scenario: T1 passes a, b and c, the baseline only a. The
    Mantel-Haenszel difference's 95% interval (Sato's, a normal approximation) lies
    wholly above 0, while CMH's test, corrected across the family of the tests across
    scenarios, finds no significant difference, and that is T1's verdict. The chart
    says what it draws (unadjusted, not the test's own interval) and where the verdict
    comes from; every format's note names that family, not the run-level one."""
    store = Store.from_url(redis_url, prefix=PREFIX)
    cells = {
        ("T0", "a"): Cell((True,)),
        ("T0", "b"): Cell((False,)),
        ("T0", "c"): Cell((False,)),
        **{("T1", s): Cell((True,)) for s in "abc"},
    }
    exp_id = seed_experiment(store, tmp_path, cells)
    report = json.loads(run_cli("report", exp_id, "--format", "json", env=fleet_env).stdout)
    vs = report["tiers"]["T1"]["analysis"]["vs_baseline"]
    these = report["tiers"]["T1"]["analysis"]["across_scenarios"]["these_scenarios"]
    family = report["multiplicity_across_scenarios"]
    assert vs["verdict"] == "no significant difference"
    assert vs["verdict_from"] == "CMH and van Elteren on these 3 scenarios"
    assert these["risk_difference_ci"]["low"] > 0  # the case: an interval clear of 0
    assert these["cmh_p_adjusted"] > 0.05 and family["tests"] == 4
    assert report["multiplicity"]["tests"] == 8  # the run-level family: another count
    cmh = f"CMH (p {these['cmh_p']:.3f}, adj. {these['cmh_p_adjusted']:.3f})"
    across = "Holm-corrected across the 4 across-scenario tests (family-wise error rate 0.05)"

    page = run_cli("report", exp_id, "--format", "html", env=fleet_env).stdout
    figure = _figure(page, "difference")
    assert _intervals(figure)["T1"][0] > 0
    caption = " ".join(_text(figure.split("<figcaption>")[1]).split())
    assert caption.startswith(
        "Each tier's difference in pass rate from the baseline (T0), as its verdict's tests "
        "take it, with a 95% interval not adjusted for multiple tests: a verdict is read from "
        "its tests' adjusted p-values (below), not from the interval"
    ), caption
    assert "the one its verdict is read from" not in page
    assert (
        "T1: across-scenario: Mantel-Haenszel risk difference on these 3 scenarios (Sato's "
        f"interval); its verdict (no significant difference) comes from {cmh} and van Elteren "
        f"(p {these['van_elteren_p']:.3f}, adj. {these['van_elteren_p_adjusted']:.3f}), "
        f"{across}; the interval leaves out 0, yet CMH's adjusted p, "
        f"{these['cmh_p_adjusted']:.3f}, is not significant: the interval is neither adjusted "
        "for the family's tests nor the test's own, and the verdict is the test's"
    ) in caption

    # The verdict table's note, in the page and in the terminal: the family the verdict
    # came from, and no "could detect" of the pooled test the verdict is not read from.
    table = page.split('<section id="verdict">')[1].split("</section>")[0]
    verdict = " ".join(_text(table).split())
    terminal = " ".join(run_cli("report", exp_id, env=fleet_env).stdout.split())
    for shown in (verdict, terminal):
        assert f"verdicts come from CMH and van Elteren on each tier's scenarios, {across}" in (
            shown
        )
        assert "run-level" not in shown and "could detect" not in shown
    # The tables of tests: their p adj. is the run-level family's, T1's verdict the other's.
    said = (
        "p adj.: Holm-corrected across the 8 run-level tests (family-wise error rate 0.05); "
        "verdicts come from these p-values, except those of T1: from CMH and van Elteren on "
        f"their scenarios, {across}"
    )
    unadjusted = "the intervals are 95% each, not adjusted for multiple tests"
    for fmt in ("markdown", "github", "html"):
        shown = " ".join(
            html.unescape(run_cli("report", exp_id, "--format", fmt, env=fleet_env).stdout).split()
        )
        assert said in shown and unadjusted in shown, fmt
    full = " ".join(run_cli("report", exp_id, "--full", env=fleet_env).stdout.split())
    assert said in full and unadjusted in full
