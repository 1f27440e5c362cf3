"""`scheduler report` in every format, end to end: a finished experiment in Redis, the CLI.

The figures beyond ProjectScylla's (intervals, tests, pass@k) are checked against
scipy and plain combinatorics; the HTML report is opened in headless Chromium.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import shlex
import shutil
import statistics
from pathlib import Path

import pytest
from scipy import stats

from core.results.run import ProcessMetrics, RunStatus
from core.store import Store
from tests.conftest import EXAMPLES, PREFIX, SCHEDULER, passable, run_cli
from tests.support.experiments import Cell, impl_rate, seed_experiment
from tests.support.html_pages import rendered_json
from tests.support.terminal import heading_words, in_terminal, table_row

pytestmark = pytest.mark.integration

NAME = "guidance-v2"
# llm-tool-test's guidance example: v2 of the docs is better.
OUTCOMES = {
    ("T0", "s1"): (2, dict(error_rate=0.35, help_invocations=4, first_try_success_rate=0.55)),
    ("T0", "s2"): (0, dict(error_rate=0.35, help_invocations=4, first_try_success_rate=0.55)),
    ("T1", "s1"): (8, dict(error_rate=0.10, help_invocations=1, first_try_success_rate=0.82)),
    ("T1", "s2"): (10, dict(error_rate=0.10, help_invocations=1, first_try_success_rate=0.82)),
}
CONTEXT = {"T0": (1000, 1500, 2000), "T1": (1000, 1200, 1400, 1600)}
RUNS = 10


def _passed(passes: int) -> tuple[bool, ...]:
    return tuple(i < passes for i in range(RUNS))


def _composites(tier: str) -> list[float]:
    values = []
    for (t, _), (passes, _) in OUTCOMES.items():
        if t == tier:
            values += [
                ((1.0 if p else 0.0) + impl_rate(p, i)) / 2 for i, p in enumerate(_passed(passes))
            ]
    return values


@pytest.fixture(scope="module")
def experiment(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    store = Store.from_url(redis_url, prefix=PREFIX)
    cells = {
        key: Cell(_passed(passes), context=CONTEXT[key[0]], **interaction)  # type: ignore[arg-type]
        for key, (passes, interaction) in OUTCOMES.items()
    }
    return seed_experiment(store, tmp_path_factory.mktemp("matrices"), cells, name=NAME)


def _report(exp_id: str, env: dict[str, str], *args: str) -> str:
    result = run_cli("report", exp_id, *args, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_json_carries_intervals_tests_pass_at_k_flakiness_and_context_growth(
    experiment: str, fleet_env: dict[str, str]
) -> None:
    report = json.loads(_report(experiment, fleet_env, "--format", "json"))
    t0, t1 = report["tiers"]["T0"], report["tiers"]["T1"]

    wilson = stats.binomtest(18, 20).proportion_ci(confidence_level=0.95, method="wilson")
    assert t1["analysis"]["pass_rate_ci"]["low"] == pytest.approx(wilson.low)
    assert t1["analysis"]["pass_rate_ci"]["high"] == pytest.approx(wilson.high)
    ci = t1["analysis"]["composite_median_ci"]
    assert ci["low"] <= t1["composite_score"]["median"] <= ci["high"]

    versus = t1["analysis"]["vs_baseline"]
    assert versus["reference"] == "T0" and t0["analysis"]["vs_baseline"] is None
    assert versus["fisher_p"] == pytest.approx(stats.fisher_exact([[18, 2], [2, 18]]).pvalue)
    mwu = stats.mannwhitneyu(_composites("T1"), _composites("T0"), alternative="two-sided")
    assert versus["mann_whitney_u"] == pytest.approx(mwu.statistic)
    assert versus["mann_whitney_p"] == pytest.approx(mwu.pvalue)
    assert versus["pass_rate_delta"] == pytest.approx(0.9 - 0.1)
    assert versus["verdict"] == "better"
    # Per scenario, against the baseline's runs of the same scenario.
    s1 = t1["scenarios"]["s1"]["analysis"]["vs_baseline"]
    assert s1["fisher_p"] == pytest.approx(stats.fisher_exact([[8, 2], [2, 8]]).pvalue)

    def pass_at(n: int, c: int, k: int) -> float:
        return 1 - math.comb(n - c, k) / math.comb(n, k)

    # A tier's pass@k is the mean over its scenarios (T0: 2/10 and 0/10 passed).
    assert t0["analysis"]["pass_at_k"]["3"] == pytest.approx(
        (pass_at(10, 2, 3) + pass_at(10, 0, 3)) / 2
    )
    assert t1["scenarios"]["s1"]["analysis"]["pass_hat_k"]["5"] == pytest.approx(
        math.comb(8, 5) / math.comb(10, 5)
    )
    assert set(t1["analysis"]["pass_at_k"]) == {"1", "3", "5", "10"}
    assert t0["analysis"]["flaky_scenarios"] == ["s1"]  # s2 always fails: not flaky
    assert t1["analysis"]["flaky_scenarios"] == ["s1"]  # s2 always passes

    by_call = [c["mean"] for c in t1["context_by_call"]]
    assert by_call == [1000, 1200, 1400, 1600]
    assert t1["context_growth_avg"]["median"] == 200


def test_markdown_has_every_section_and_the_guidance_comparison(
    experiment: str, fleet_env: dict[str, str]
) -> None:
    markdown = _report(experiment, fleet_env, "--format", "markdown")
    titles = re.findall(r"^## (.+)$", markdown, re.MULTILINE)
    t1_grade = json.loads(_report(experiment, fleet_env, "--format", "json"))["tiers"]["T1"][
        "grade"
    ]
    assert titles == [
        # What the one screen shows first: the verdicts, why runs failed.
        "Verdict per tier against the baseline (T0)",
        "Most common failure reasons (20 runs failed)",
        "Summary",
        "Cross-tier against the baseline (T0)",
        "Confidence and significance against the baseline (T0)",
        # Two scenarios: the section across scenarios (tests.unit.core.analysis.test_scenarios).
        "Scenarios as clusters: each tier's mean with error bars that respect its scenarios",
        "Against the baseline (T0) on these scenarios, and on scenarios like these",
        "pass@k and pass^k",
        "Interaction metrics (mean per run)",
        "Guidance comparison: s1",
        "Guidance comparison: s2",
        "Context growth per LLM call",
        # cost of pass = mean cost / mean pass rate: 0.0145 / 0.1 and 0.0145 / 0.9
        "Seed metrics: T0 (grade F, cost of pass $0.1450)",
        f"Seed metrics: T1 (grade {t1_grade}, cost of pass $0.0161)",
    ]
    guidance = markdown.split("## Guidance comparison: s1")[1].split("##")[0]
    assert "| metric | T0 | T1 |" in guidance
    assert "| error rate | 0.350 | 0.100 |" in guidance
    assert "| help-seeking (--help per run) | 4.000 | 1.000 |" in guidance
    assert "| first-try success | 0.550 | 0.820 |" in guidance
    wilson = stats.binomtest(18, 20).proportion_ci(method="wilson")
    assert f"| T1 | (all) | 0.900 [{wilson.low:.3f}, {wilson.high:.3f}] |" in markdown
    assert "| +0.800 | <0.001 |" in markdown  # Fisher's p of 18/20 against 2/20
    seed_t1 = markdown.split("## Seed metrics: T1")[1]
    # ProjectScylla's Statistics under their own names: median, mean, mode, std_dev, min, max.
    assert "| metric | median | mean | mode | std_dev | min | max | n |" in seed_t1
    assert (
        "| (all) | pass_rate | 1.0000 | 0.9000 | 1.0000 | 0.3000 | 0.0000 | 1.0000 | 20 |"
        in seed_t1
    )
    assert "| s1 | context_growth_avg |" in seed_t1
    context = markdown.split("## Context growth per LLM call")[1].split("##")[0]
    assert "| T1 | 1000 | 200.0 | 1000 | 1200 | 1400 | 1600 |" in context
    assert "| T0 | 1000 | 500.0 | 1000 | 1500 | 2000 | - |" in context


@pytest.mark.parametrize("priced", [(), ("T1",)])
def test_unknown_costs_are_said_to_be_unknown_not_that_no_tier_passed(
    redis_url: str, tmp_path: Path, fleet_env: dict[str, str], priced: tuple[str, ...]
) -> None:
    """Without `pricing:` every tier passes 10/10 and still has no cost of pass: the
    notes say the costs are unknown and how to add prices."""
    store = Store.from_url(redis_url, prefix=PREFIX)
    cells = {
        (tier, "s1"): Cell(_passed(RUNS), pass_impl=1.0, unpriced=tier not in priced)
        for tier in ("T0", "T1")
    }
    exp_id = seed_experiment(store, tmp_path, cells)
    markdown = _report(exp_id, fleet_env, "--format", "markdown")
    cross = markdown.split("## Cross-tier")[1].split("##")[0]
    assert "no tier passed" not in cross and "scored above 0" not in cross
    prices = "add each model's price under `pricing:` in the matrix (docs/MATRIX.md)"
    if not priced:
        assert (
            f"costs are unknown, so there is no frontier cost of pass and no best value: {prices}"
        ) in cross
    else:
        assert (
            "frontier cost of pass $0.0145 (T1, the cheapest tier per pass) (cost unknown "
            f"for T0: {prices}); best value: T1"
        ) in cross


def test_the_price_hint_names_each_model_the_runs_recorded_without_a_price(
    redis_url: str, tmp_path: Path, fleet_env: dict[str, str]
) -> None:
    """T0's CLI picked its model for each request: its runs name three models, one of
    them priced, and their cost is unknown. Every hint to add prices names the two
    without one, and no other; T1's priced runs draw no hint."""
    store = Store.from_url(redis_url, prefix=PREFIX)
    routed = ("gemini-3.5-flash-lite", "gemini-3.1-pro-preview", "gemini-2.5-pro")
    cells = {
        ("T0", "s1"): Cell(_passed(RUNS), pass_impl=1.0, unpriced=True, models=routed),
        ("T1", "s1"): Cell(_passed(RUNS), pass_impl=1.0, models=("claude-sonnet-4",)),
    }
    exp_id = seed_experiment(store, tmp_path, cells)
    report = json.loads(_report(exp_id, fleet_env, "--format", "json"))
    assert report["tiers"]["T0"]["unpriced_models"] == [
        "gemini-3.1-pro-preview",
        "gemini-3.5-flash-lite",
    ]
    assert report["tiers"]["T1"]["unpriced_models"] == []
    prices = (
        "add each model's price under `pricing:` in the matrix (docs/MATRIX.md): "
        "gemini-3.1-pro-preview, gemini-3.5-flash-lite"
    )
    brief = " ".join(_report(exp_id, {**fleet_env, "COLUMNS": "250"}).split())
    assert f"- cost unknown for runs of T0: {prices} " in brief
    full = " ".join(_report(exp_id, {**fleet_env, "COLUMNS": "250"}, "--full").split())
    assert f"cost unknown for {RUNS} runs ({prices})" in full
    assert f"(cost unknown for T0: {prices}); best value: T1" in full
    for shown in (brief, full):
        assert "gemini-2.5-pro" not in shown and "claude-sonnet-4" not in shown


def test_the_terminal_report_leads_with_verdicts_and_why_runs_failed(
    redis_url: str, tmp_path: Path, fleet_env: dict[str, str]
) -> None:
    """One screen: each tier's headline, the most common failure reasons with a
    `scheduler show` command for a run of each, and where the full report is."""
    store = Store.from_url(redis_url, prefix=PREFIX)
    gates = "gates failed: out-file"
    t0 = {i: gates for i in range(2, 7)} | {i: "agent_error: exit 1: boom" for i in (7, 8, 9)}
    cells = {
        ("T0", "s1"): Cell(_passed(2), reasons=t0),
        ("T1", "s1"): Cell(
            _passed(8),
            reasons={8: gates, 9: "judge unreachable: connection refused"},
            statuses={9: RunStatus.infra_error},
        ),
    }
    exp_id = seed_experiment(store, tmp_path, cells)
    report = json.loads(_report(exp_id, fleet_env, "--format", "json"))
    t1_verdict = report["tiers"]["T1"]["analysis"]["vs_baseline"]["verdict"]
    shown = _report(exp_id, {**fleet_env, "COLUMNS": "80"})
    lines = shown.rstrip("\n").splitlines()
    assert len(lines) <= 30 and max(map(len, lines)) <= 80, shown
    assert "…" not in shown  # nothing cut at 80 columns
    # Headings whole where the table fits with them so (they wrapped to the values).
    assert table_row(shown, "tier") == [
        "tier", "verdict", "passes/counted", "pass rate [95% CI]", "cost of pass $"
    ]  # fmt: skip
    assert lines[0].startswith(f"demo ({exp_id}): complete, 20/20 runs, 19 counted, 10 passed")
    t0_wilson = stats.binomtest(2, 10).proportion_ci(method="wilson")
    assert table_row(shown, "T0") == [
        "T0",
        "baseline",
        "2/10",
        f"0.200 [{t0_wilson.low:.3f}, {t0_wilson.high:.3f}]",
        "0.0725",  # mean cost 0.0145 / pass rate 0.2
    ]
    assert table_row(shown, "T1")[1:3] == [t1_verdict, "8/9"]
    assert "1 infrastructure error is kept out of these figures" in shown
    # The reasons, most common first, each with a run that failed so.
    reasons = shown.split("Most common failure reasons (10 runs failed)")[1]
    assert [table_row(reasons, n)[1] for n in ("6", "3", "1")] == [
        gates,
        "agent_error: exit 1: boom",
        "infrastructure error: judge unreachable: connection refused",
    ]
    examples = re.findall(r"e\.g\. scheduler show (\S+)", reasons)
    assert examples == [f"{exp_id}:T0:s1:2", f"{exp_id}:T0:s1:7", f"{exp_id}:T1:s1:9"]
    example = run_cli("show", examples[1], env=fleet_env)
    assert example.returncode == 0 and "reason: agent_error: exit 1: boom" in example.stdout
    # The last lines, wrapped to the terminal between its commands.
    last = next(i for i, line in enumerate(lines) if line.startswith("the full report:"))
    assert " ".join(lines[last:]) == (
        f"the full report: `scheduler report {exp_id} --full` (every section), "
        f"or `scheduler report {exp_id} --format html > report.html` (charts and the run table)"
    )
    assert "Seed metrics" not in shown
    full = _report(exp_id, fleet_env, "--full")
    assert "Summary" in full and "Seed metrics: T1" in full


def test_the_full_report_opens_with_the_one_screens_verdicts_and_failure_reasons(
    redis_url: str, tmp_path: Path, fleet_env: dict[str, str]
) -> None:
    """`--full` is every section: it opens with what the one screen shows (each tier's
    verdict, the most common failure reasons with a `scheduler show` command that works
    as printed), then the rest; markdown the same, each command in its row as code."""
    store = Store.from_url(redis_url, prefix=PREFIX)
    gates = "gates failed: out-file"
    cells = {
        ("T0", "s1"): Cell(_passed(2), reasons={i: gates for i in range(2, 10)}),
        ("T1", "s1"): Cell(_passed(8), reasons={8: "agent_error: exit 1: boom", 9: gates}),
    }
    exp_id = seed_experiment(store, tmp_path, cells)
    env = {**fleet_env, "COLUMNS": "200"}
    brief = _report(exp_id, env)
    full = _report(exp_id, env, "--full")
    titles = re.findall(r"\n\n([^\n]+)", full)  # each section's, after a blank line
    assert titles[:3] == [
        "Verdict per tier against the baseline (T0)",
        "Most common failure reasons (10 runs failed)",
        "Summary",
    ], titles
    for tier in ("tier", "T0", "T1"):  # the one screen's verdict table, row for row
        assert table_row(full, tier) == table_row(brief, tier)
    examples = re.findall(r"^\s*e\.g\. scheduler show (\S+)$", full, re.MULTILINE)
    assert examples == [f"{exp_id}:T0:s1:2", f"{exp_id}:T1:s1:8"]
    assert full.count("scheduler show") == 2
    shown = run_cli("show", examples[1], env=fleet_env)
    assert shown.returncode == 0 and "reason: agent_error: exit 1: boom" in shown.stdout
    assert "Seed metrics: T1" in full
    notes = [line for line in full.splitlines() if line.startswith("- ")]
    assert notes and len(notes) == len(set(notes)), [n for n in notes if notes.count(n) > 1]

    markdown = _report(exp_id, fleet_env, "--format", "markdown")
    said = [line for line in markdown.splitlines() if line.startswith("- ")]
    assert said and len(said) == len(set(said)), [n for n in said if said.count(n) > 1]
    headings = re.findall(r"^## (.+)$", markdown, re.MULTILINE)
    assert headings[:3] == [
        "Verdict per tier against the baseline (T0)",
        "Most common failure reasons (10 runs failed)",
        "Summary",
    ]
    assert f"| 9 | {gates} (e.g. `scheduler show {exp_id}:T0:s1:2`) |" in markdown
    assert f"| 1 | agent_error: exit 1: boom (e.g. `scheduler show {exp_id}:T1:s1:8`) |" in (
        markdown
    )
    assert "| T1 | " in markdown.split("## Verdict per tier")[1].split("##")[0]


# Words, a parenthesis and a name: cut at 90 characters, inside "configuration".
LONG_REASON = (
    "agent exited with code 1 (preset claude-code: the CLI printed that its configuration "
    "file could not be read, and stopped)"
)


def test_commands_and_ids_are_whole_at_80_columns_and_reasons_cut_at_a_word(
    redis_url: str, tmp_path: Path, fleet_env: dict[str, str]
) -> None:
    """A long experiment id and scenario name at 80 columns, piped and in a terminal:
    every `scheduler show` command and the full report's commands stand whole on one
    line (on a line of their own when longer than the terminal); a long reason wraps at
    its words and is cut after a whole word."""
    store = Store.from_url(redis_url, prefix=PREFIX)
    scenario = "create_notes_with_tags_and_search_them"
    cells = {
        ("T0", scenario): Cell(_passed(2), reasons={i: LONG_REASON for i in range(2, 10)}),
        ("T1", scenario): Cell(_passed(9), reasons={9: "gates failed: out-file"}),
    }
    exp_id = seed_experiment(store, tmp_path, cells, name="notes-guidance-with-a-long-name")
    piped = _report(exp_id, {**fleet_env, "COLUMNS": "80"})
    env = {k: v for k, v in fleet_env.items() if k not in ("COLUMNS", "LINES")}
    terminal = in_terminal([SCHEDULER, "report", exp_id], env, rows=50, columns=80)
    for shown in (piped, terminal):
        lines = shown.splitlines()
        commands = [
            f"e.g. scheduler show {exp_id}:T0:{scenario}:2",
            f"e.g. scheduler show {exp_id}:T1:{scenario}:9",
        ]
        assert [line.strip() for line in lines if "scheduler show" in line] == commands, shown
        assert any(f"`scheduler report {exp_id} --full`" in line for line in lines), shown
        html = f"`scheduler report {exp_id} --format html > report.html`"
        assert any(html in line for line in lines), shown
        # Only a command longer than the terminal is wider than it, on a line of its own.
        whole = [*commands, html]
        assert all(len(line) <= 80 for line in lines if line.strip() not in whole), shown
        # The reason: whole words up to the cut, wrapped at words.
        start = next(i for i, line in enumerate(lines) if LONG_REASON[:20] in line)
        reason = " ".join(
            [lines[start].split(maxsplit=1)[1], *(x.strip() for x in lines[start + 1 : start + 3])]
        ).split("…")[0]
        assert LONG_REASON.startswith(reason) and LONG_REASON[len(reason)] == " ", reason
        assert len(reason) >= 60 and f"{reason}…" in " ".join(shown.split())


def test_scenario_view_puts_tiers_side_by_side_and_only_that_scenario(
    experiment: str, fleet_env: dict[str, str]
) -> None:
    view = _report(experiment, fleet_env, "--format", "markdown", "--scenario", "s2")
    titles = re.findall(r"^## (.+)$", view, re.MULTILINE)
    assert titles[0] == "Guidance comparison: s2"
    rows = [line for line in view.splitlines() if line.startswith("| T")]
    assert rows and all(line.split(" | ")[1] == "s2" for line in rows)
    terminal = _report(experiment, fleet_env, "--scenario", "s2")
    assert "Guidance comparison: s2" in terminal and "first-try success" in terminal

    unknown = run_cli("report", experiment, "--scenario", "nope", env=fleet_env)
    assert unknown.returncode == 2 and "its scenarios: s1, s2" in unknown.stderr
    assert "did you mean" not in unknown.stderr  # no scenario is near "nope"
    misspelt = run_cli("report", experiment, "--scenario", "s1x", env=fleet_env)
    assert misspelt.returncode == 2
    assert "has no scenario 's1x'; its scenarios: s1, s2; did you mean `s1`?" in misspelt.stderr
    as_json = run_cli("report", experiment, "--format", "json", "--scenario", "s1", env=fleet_env)
    assert as_json.returncode == 2 and "--scenario is a view" in as_json.stderr


def test_csv_rows_carry_the_new_figures(experiment: str, fleet_env: dict[str, str]) -> None:
    rows = list(csv.DictReader(io.StringIO(_report(experiment, fleet_env, "--format", "csv"))))
    assert [(r["tier"], r["scenario"]) for r in rows] == [
        ("T0", ""),
        ("T0", "s1"),
        ("T0", "s2"),
        ("T1", ""),
        ("T1", "s1"),
        ("T1", "s2"),
    ]
    t1 = rows[3]
    assert float(t1["vs_baseline_fisher_p"]) == pytest.approx(
        stats.fisher_exact([[18, 2], [2, 18]]).pvalue
    )
    assert t1["vs_baseline_verdict"] == "better" and t1["flaky_scenarios"] == "s1"
    assert rows[0]["vs_baseline_verdict"] == ""
    assert float(rows[0]["pass_at_1"]) == pytest.approx(0.1)


def _html(exp_id: str, env: dict[str, str]) -> str:
    page = _report(exp_id, env, "--format", "html")
    # Self-contained: nothing fetched (its links go to its own sections); its one
    # script (the run table's) is inline.
    assert not re.search(r"""\s(src|href)\s*=\s*(?!"#)|url\(|@import""", page)
    assert 'href="#runs"' in page
    assert page.count("<script>") == 1
    assert f"<h1>{NAME} ({exp_id})" in page
    # The difference from the baseline and one per scenario lead; four charts after them.
    assert page.count('<figure class="chart"') == 1 + 2 + 4
    return page


def test_html_is_one_self_contained_file_with_its_charts(
    experiment: str, fleet_env: dict[str, str]
) -> None:
    page = _html(experiment, fleet_env)
    assert re.findall(r'<rect class="bar" data-label="(\w+)" data-value="([\d.]+)"', page) == [
        ("T0", "0.1"),
        ("T1", "0.9"),
        ("T0", f"{statistics.median(_composites('T0')):.6g}"),
        ("T1", f"{statistics.median(_composites('T1')):.6g}"),
    ]
    assert page.count('class="error-bar"') == 4
    assert page.count('class="point"') == 2 and page.count('class="series"') == 2
    assert "<h2>Guidance comparison: s1</h2>" in page


# Appended by the test only: it measures what Chromium laid out.
_MEASURE = """<script>
const charts = [...document.querySelectorAll("figure.chart")].map(fig => {
  const svg = fig.querySelector("svg");
  const size = el => el.getBoundingClientRect();
  return {
    id: fig.id, width: size(svg).width, height: size(svg).height,
    bars: [...svg.querySelectorAll("rect.bar")].map(
      r => ({label: r.dataset.label, value: +r.dataset.value, height: size(r).height})),
    whiskers: [...svg.querySelectorAll(".error-bar line")].map(l => size(l).height),
    points: [...svg.querySelectorAll("circle.point")].map(c => size(c).width),
    series: [...svg.querySelectorAll("polyline.series")].map(
      p => ({label: p.dataset.label, points: p.points.numberOfItems, width: size(p).width})),
  };
});
const out = document.createElement("pre");
out.id = "measured";
out.textContent = JSON.stringify(charts);
document.body.appendChild(out);
</script>"""


def test_html_renders_its_charts_in_headless_chromium(
    experiment: str, fleet_env: dict[str, str], tmp_path: Path
) -> None:
    measured = rendered_json(_html(experiment, fleet_env), _MEASURE, "measured", tmp_path)
    charts = {c["id"]: c for c in measured}
    assert set(charts) == {
        "difference",
        "scenario-0",
        "scenario-1",
        "pass-rate",
        "composite",
        "cost-composite",
        "context-growth",
    }
    # The interval charts are as tall as their rows (a tier or two here), the others 320 px.
    assert all(c["width"] > 300 and c["height"] > 60 for c in charts.values())
    assert all(charts[c]["height"] > 200 for c in ("pass-rate", "composite", "context-growth"))
    t0, t1 = charts["pass-rate"]["bars"]
    assert (t0["label"], t1["label"]) == ("T0", "T1")
    # Laid out to scale: 0.9 is nine times as tall as 0.1.
    assert t1["height"] / t0["height"] == pytest.approx(9, rel=0.03)
    assert all(h > 1 for h in charts["pass-rate"]["whiskers"][::3])
    assert len(charts["cost-composite"]["points"]) == 2
    series = {s["label"]: s for s in charts["context-growth"]["series"]}
    assert series["T0"]["points"] == 3 and series["T1"]["points"] == 4
    assert all(s["width"] > 100 for s in series.values())


def test_csv_with_runs_gives_one_row_per_run_and_other_formats_refuse_runs(
    experiment: str, fleet_env: dict[str, str]
) -> None:
    rows = list(
        csv.DictReader(io.StringIO(_report(experiment, fleet_env, "--format", "csv", "--runs")))
    )
    assert len(rows) == RUNS * len(OUTCOMES)
    for (tier, scenario), (passes, _) in OUTCOMES.items():
        cell = [r for r in rows if (r["tier"], r["scenario"]) == (tier, scenario)]
        assert sorted(int(r["run_index"]) for r in cell) == list(range(RUNS))
        assert sum(r["passed"] == "True" for r in cell) == passes
        assert {r["status"] for r in cell} == {"completed"}
        assert all(r["run_id"].endswith(f":{tier}:{scenario}:{r['run_index']}") for r in cell)
    refused = run_cli("report", experiment, "--format", "markdown", "--runs", env=fleet_env)
    assert (
        refused.returncode == 2
        and "--runs lists every run in --format json or csv" in refused.stderr
    )


def test_json_is_format_json_and_options_that_disagree_are_refused(
    experiment: str, fleet_env: dict[str, str], tmp_path: Path
) -> None:
    """`report --json`, as submit, show, list and status take it, was "No such option";
    and of two format options that disagree one was ignored without a word (`submit
    --json --format html` printed JSON, `--format github --full` the summary): a usage
    error naming both, before anything starts."""
    assert json.loads(_report(experiment, fleet_env, "--json")) == json.loads(
        _report(experiment, fleet_env, "--format", "json")
    )
    assert json.loads(_report(experiment, fleet_env, "--json", "--format", "json"))["tiers"]
    matrix = shutil.copytree(EXAMPLES, tmp_path / "examples") / "matrix.yaml"
    embedded = {k: v for k, v in fleet_env.items() if k != "EVALFLEET_BROKER_URL"}
    for args, said in (
        (("report", experiment, "--json", "--format", "csv"),
         "--json is --format json: it cannot go with --format csv"),
        (("submit", str(matrix), "--json", "--format", "html"),
         "--json is --format json: it cannot go with --format html"),
        (("report", experiment, "--format", "github", "--full"),
         "--full gives every section of the report, and --format github is a pull request's "
         "summary"),
        (("report", experiment, "--format", "csv", "--full"),
         "--full gives every section of the report, and --format csv is rows of figures"),
    ):  # fmt: skip
        refused = run_cli(*args, env=embedded if args[0] == "submit" else fleet_env, cwd=tmp_path)
        assert refused.returncode == 2, refused.stderr
        assert refused.stdout == "" and f"Error: {said}" in refused.stderr, refused.stderr
    assert not (tmp_path / ".evalfleet").exists()  # the submit started nothing
    # Formats that have every section anyway take --full.
    assert "T1" in _report(experiment, fleet_env, "--format", "markdown", "--full")


def test_list_and_status_are_tables_with_headers(
    experiment: str, fleet_env: dict[str, str]
) -> None:
    status = run_cli("status", experiment, env=fleet_env)
    assert status.returncode == 0, status.stderr
    # Wide: the session's store lists every test's experiments, long ids among them.
    listed = run_cli("list", env={**fleet_env, "COLUMNS": "250"})
    assert listed.returncode == 0, listed.stderr
    headings = set(
        ["experiment", "status", "runs", "ran", "passed", "infra", "errors", "cancelled", "created"]
    )
    assert heading_words(status.stdout) == headings
    # The session's store: another test's experiment that a budget stopped adds a column.
    budget = {"not", "run", "(budget)"} & heading_words(listed.stdout)
    assert heading_words(listed.stdout) == headings | {"report", "versions", "stored"} | budget
    assert table_row(status.stdout, experiment)[:6] == [
        experiment,
        "complete",
        "40/40",
        "20",
        "0",
        "0",
    ]
    row = table_row(listed.stdout, experiment)
    if budget:
        assert row.pop(6) == "0"  # none of this experiment's runs was stopped by a budget
    assert row[:6] == [experiment, "complete", "40/40", "20", "0", "0"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", row[6]) and row[7] == "1"
    assert re.fullmatch(r"[\d.]+ KB", row[8])


def test_full_report_defines_the_process_metrics_it_shows(
    redis_url: str, fleet_env: dict[str, str], tmp_path: Path
) -> None:
    """r_prog, strategic_drift, change fail %: each process metric the Seed metrics
    table shows is defined in a phrase under it, and none it does not show."""
    store = Store.from_url(redis_url, prefix=PREFIX)
    process = ProcessMetrics(r_prog=0.5, r_prog_simple=0.5, change_fail_percentage=0.25)
    exp_id = seed_experiment(store, tmp_path, {("T0", "s"): Cell((True, False), process=process)})
    full = _report(exp_id, {**fleet_env, "COLUMNS": "200"}, "--full")
    seed = full.split("Seed metrics: T0")[1]
    assert "change_fail_percentage" in seed and "strategic_drift" not in seed
    notes = [line.strip() for line in seed.splitlines() if line.strip().startswith("- ")]
    assert notes == [
        "- r_prog: the weight of the scenario's expected steps the agent's commands "
        "reached, over the weight of them all",
        "- r_prog_simple: r_prog with every step weighing 1",
        "- change_fail_percentage: the share of the commands matching a change pattern "
        "that failed (a fraction, 0 to 1)",
    ]


def test_two_scenarios_are_too_few_for_a_verdict_on_scenarios_like_these(
    redis_url: str, fleet_env: dict[str, str], tmp_path: Path
) -> None:
    """T1 passes 8 of 10 where T0 passes 2, in both scenarios: no spread, so the sign
    test's p of 2 / 2^2 (the t test's limit, p = 0, once stood there), and 2 scenarios
    say nothing of others. Every format says so."""
    store = Store.from_url(redis_url, prefix=PREFIX)
    cells = {(t, s): Cell(_passed(8 if t == "T1" else 2)) for t in ("T0", "T1") for s in ("a", "b")}
    exp_id = seed_experiment(store, tmp_path, cells)
    report = json.loads(_report(exp_id, fleet_env, "--format", "json"))
    like = report["tiers"]["T1"]["analysis"]["across_scenarios"]["like_these"]
    assert (like["pass_rate"]["mean"], like["pass_rate"]["p"]) == (pytest.approx(0.6), 0.5)
    assert like["verdict"] == "too few scenarios"
    env = {**fleet_env, "COLUMNS": "250"}
    for fmt in ("table", "markdown", "github", "html"):
        shown = _report(exp_id, env, "--format", fmt, *(["--full"] if fmt == "table" else []))
        assert (
            "T1: better on these 2 scenarios; not shown to carry over to others (on "
            "scenarios like these): 2 scenarios are too few to say anything" in shown
        ), fmt
        # The question's own row (github's short table has no verdict column).
        rows = [row for row in re.split(r"\n|</?tr", shown) if "on scenarios like these (2)" in row]
        assert all("too few scenarios" in row and "better" not in row for row in rows), rows
        assert rows or fmt == "github", fmt

    # Alike in both scenarios, the tiers show a correlation of 0, at which the formula
    # would promise any difference to unlimited runs: 2 scenarios cannot keep that.
    plan = report["tiers"]["T1"]["analysis"]["across_scenarios"]["planning"]
    assert (plan["icc"], plan["like_these_limit"]) == (0.0, 0.0)
    level = plan["alpha"]

    def like_these(g: int) -> float:
        t = stats.t.ppf(1 - level / 2, g - 1) + stats.t.ppf(0.8, g - 1)
        return float(t * math.sqrt(2 * 0.25 / (g * RUNS)))

    fewest = next(g for g in range(2, 1000) if like_these(g) <= 0.3)
    for fmt in ("table", "markdown"):
        shown = _report(exp_id, env, "--format", fmt, "--full").split("T1: planning, ")[1]
        planning = " ".join(re.split(r"\n- |\n\n", shown)[0].split())  # the note alone
        assert "unlimited runs" not in planning and "0 points or more" not in planning, fmt
        assert (
            "; more runs alone cannot be counted on to detect less: how much scenarios differ "
            "from one another bounds what more runs per scenario can detect, and 2 scenarios "
            f"cannot measure it; more scenarios can: {fewest} scenarios x {RUNS} runs would "
            "detect 30 points at this correlation"
        ) in planning, fmt


def test_a_run_without_commands_has_no_command_rates_and_no_interaction_layer(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    """A tier whose agent ran no target command read 0 % first-try success and 0 %
    errors (a rate of nothing), and its layered composite counted that 0: its rates are
    now no figure ("-"), the tier beside it keeps its own, and the composite is its
    gates'."""
    events = (
        '{"type":"tool_call","id":"c1","command":"my-tool list"}\n'
        '{"type":"tool_result","id":"c1","exit_code":0}\n'
    )
    busy = f"printf '%s' {shlex.quote(events)} > \"$EVALFLEET_EVENTS\"; touch out.txt"
    folder = tmp_path / "exp"
    folder.mkdir()
    (folder / "matrix.yaml").write_text(f"""
name: quiet
runs_per_tier: 2
agent: {{kind: command, command: "touch out.txt", timeout_s: 60}}
tiers:
  - {{id: quiet}}
  - {{id: busy, agent: {{command: {json.dumps(busy)}, transcript: events-jsonl}}}}
scenarios:
  - id: s
    prompt: list
    evaluation:
      gates: [{{type: file_exists, path: out.txt}}]
      composite: {{gate_weight: 0.6, judge_weight: 0.0, interaction_weight: 0.4}}
""")
    env = {k: v for k, v in fleet_env.items() if k != "EVALFLEET_BROKER_URL"}
    done = run_cli("submit", "matrix.yaml", "--json", env=env, cwd=passable(folder))
    assert done.returncode == 0, done.stderr
    tiers = json.loads(done.stdout)["tiers"]
    quiet, busy_tier = tiers["quiet"], tiers["busy"]
    assert quiet["passes"] == busy_tier["passes"] == 2
    for rate in ("error_rate", "first_try_success_rate", "retry_rate", "iteration_ratio"):
        assert (
            quiet["interaction"][rate]["count"] == 0 and quiet["interaction"][rate]["mean"] is None
        )
        assert busy_tier["interaction"][rate]["count"] == 2
    assert busy_tier["interaction"]["first_try_success_rate"]["mean"] == 1.0
    assert quiet["interaction"]["total_commands"]["mean"] == 0.0  # a count of none is 0
    assert quiet["layered_composite"]["mean"] == pytest.approx(1.0)  # its gates' alone
    exp_id = json.loads(done.stdout)["experiment"]["id"]
    table = run_cli("report", exp_id, "--format", "markdown", env=env, cwd=folder)
    section = table.stdout.split("Interaction metrics", 1)[1]
    row = next(line for line in section.splitlines() if line.startswith("| quiet | (all)"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    # error rate, help-seeking, first-try success, retry rate, iteration ratio, commands
    assert cells[2:] == ["-", "0.000", "-", "-", "-", "0.000"], row


def test_a_spread_of_infinite_values_is_not_defined_and_a_scenario_view_has_its_own_figures(
    redis_url: str, tmp_path: Path, fleet_env: dict[str, str]
) -> None:
    """T0 never passes: every run's cost of pass is infinite, and their spread, inf -
    inf, has no value: "not defined" in the tables, null in the JSON (never 0, which
    says the runs agree). A scenario's view gives that scenario's figures across tiers
    (its cost delta) and its own infrastructure errors, not the experiment's."""
    store = Store.from_url(redis_url, prefix=PREFIX)
    failed = tuple(False for _ in range(4))
    cells = {
        ("T0", "s1"): Cell(failed, cost=0.01),
        ("T0", "s2"): Cell(failed, cost=0.03),
        ("T1", "s1"): Cell((True, True, False, True), cost=0.05),
        ("T1", "s2"): Cell(
            (True, True, True, True),
            cost=0.20,
            reasons={3: "judge unreachable: connection refused"},
            statuses={3: RunStatus.infra_error},
        ),
    }
    exp_id = seed_experiment(store, tmp_path, cells)
    for nonfinite in ("string", "null"):
        report = json.loads(
            _report(exp_id, fleet_env, "--format", "json", "--json-nonfinite", nonfinite)
        )
        spread = report["tiers"]["T0"]["cost_of_pass_per_run"]
        assert spread["std_dev"] is None and spread["count"] == 8
        assert spread["mean"] == ("Infinity" if nonfinite == "string" else None)
        assert report["tiers"]["T0"]["scenarios"]["s1"]["cost_of_pass_per_run"]["std_dev"] is None
        # T1 s1: finite values and one infinite (a failed run): a spread without bound.
        mixed = report["tiers"]["T1"]["scenarios"]["s1"]["cost_of_pass_per_run"]["std_dev"]
        assert mixed == ("Infinity" if nonfinite == "string" else None)
    markdown = _report(exp_id, fleet_env, "--format", "markdown")
    seed_t0 = markdown.split("## Seed metrics: T0")[1].split("\n## ")[0]
    assert "| (all) | cost_of_pass_per_run | inf | inf | inf | not defined | inf | inf | 8 |" in (
        seed_t0
    )
    full = _report(exp_id, {**fleet_env, "COLUMNS": "200"}, "--full")
    row = next(line for line in full.splitlines() if "cost_of_pass_per_run" in line)
    assert row.split()[2:] == ["inf", "inf", "inf", "not", "defined", "inf", "inf", "8"]

    whole = " ".join(full.split())
    overall = f"cost delta ${report['cross_tier']['cost_delta']:.4f}"
    assert overall in whole
    for scenario, errors in (("s1", False), ("s2", True)):
        medians = [t["scenarios"][scenario]["cost_usd"]["median"] for t in report["tiers"].values()]
        delta = f"cost delta ${max(medians) - min(medians):.4f}"
        assert delta != overall
        for fmt in ("table", "markdown"):
            env = {**fleet_env, "COLUMNS": "200"}
            view = _report(exp_id, env, "--scenario", scenario, "--format", fmt)
            view = " ".join(view.split())
            assert f"- {scenario}: baseline T0; variance of the tiers' median pass_rate" in view
            assert delta in view and overall not in view, fmt
            said = "infrastructure error (1 run): judge unreachable: connection refused"
            assert (said in view) is errors, fmt
