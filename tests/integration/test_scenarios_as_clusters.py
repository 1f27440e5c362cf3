"""Error bars that respect how the runs were drawn, end to end: the issue's experiment run
through `scheduler submit` by a real worker, its report's figures checked against
statsmodels and scipy, its words against the two questions they must name.

2 tiers x 4 scenarios x 20 runs. The agent decides each run's outcome from its tier,
scenario and run index: T0 passes 10 of 20 on every scenario, T1 20, 20, 10 and 6.
Pooled over 80 runs T1 looks clearly better (Fisher p 0.015); with the scenarios
as clusters its standard error is three times wider, on these four scenarios it is
better (CMH p 0.0072), on scenarios like these it is not shown to be (paired t on
3 df, p 0.34), and on s4 it is worse than the baseline.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import statsmodels.api as sm
from scipy import stats
from statsmodels.stats.contingency_tables import StratifiedTable

from core.store import Store
from tests.conftest import StartWorker, Worker, run_cli
from tests.support.clusters import implied_icc, sato_risk_difference
from tests.support.fleet import wait_until
from tests.support.oracles import multipletests
from tests.support.terminal import planning_lines

pytestmark = pytest.mark.integration

RUNS = 20
SCENARIOS = ("s1", "s2", "s3", "s4")
PASSES = {"T0": (10, 10, 10, 10), "T1": (20, 20, 10, 6)}
# Run i of a cell passes when i < its count: the gate finds out.txt.
AGENT = (
    'case "$EVALFLEET_TIER/$EVALFLEET_SCENARIO" in T1/s1|T1/s2) k=20;; T1/s4) k=6;; *) k=10;; '
    'esac; if [ "$EVALFLEET_RUN_INDEX" -lt "$k" ]; then touch out.txt; fi'
)


def _matrix(folder: Path) -> Path:
    gates = "{gates: [{type: file_exists, path: out.txt}]}"
    scenarios = "\n".join(f"  - {{id: {s}, prompt: go, evaluation: {gates}}}" for s in SCENARIOS)
    path = folder / "matrix.yaml"
    path.write_text(
        f"name: clusters\nruns_per_tier: {RUNS}\n"
        f"agent: {{kind: command, command: {json.dumps(AGENT)}, timeout_s: 30}}\n"
        f"tiers: [{{id: T0}}, {{id: T1}}]\nscenarios:\n{scenarios}\n"
    )
    return path


def _t1_against_t0() -> StratifiedTable:
    """statsmodels' 2x2 tables of T1's passes against T0's, one a scenario."""
    return StratifiedTable(
        np.array(
            [
                [[a, RUNS - a], [b, RUNS - b]]
                for a, b in zip(PASSES["T1"], PASSES["T0"], strict=True)
            ],
            dtype=float,
        ).transpose(1, 2, 0)
    )


def _outcomes(tier: str) -> list[list[float]]:
    return [[1.0] * k + [0.0] * (RUNS - k) for k in PASSES[tier]]


@pytest.fixture(scope="module")
def submitted(
    fleet_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], str]:
    """The report JSON `scheduler submit --wait --json` printed, and the matrix file."""
    folder = tmp_path_factory.mktemp("clusters")
    matrix = _matrix(folder)
    worker = Worker(fleet_env, folder / "worker.log", concurrency=2)
    try:
        result = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env, timeout=600)
    finally:
        worker.stop()
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), str(matrix)


def test_the_runs_are_the_experiment_the_issue_measured(
    submitted: tuple[dict[str, Any], str],
) -> None:
    report, _ = submitted
    for tier, passes in PASSES.items():
        cells = report["tiers"][tier]["scenarios"]
        assert [cells[s]["passes"] for s in SCENARIOS] == list(passes)
        assert all(cells[s]["counted"] == RUNS for s in SCENARIOS)
    # What the report said before: pooled over 80 runs, Fisher p 0.015.
    assert round(report["tiers"]["T1"]["analysis"]["vs_baseline"]["fisher_p"], 3) == 0.015


def test_clustered_standard_errors_match_statsmodels(submitted: tuple[dict[str, Any], str]) -> None:
    report, _ = submitted
    clustered = report["tiers"]["T1"]["analysis"]["pass_rate_clustered"]
    values = np.array([x for cell in _outcomes("T1") for x in cell])
    groups = np.repeat(np.arange(len(SCENARIOS)), RUNS)
    model = sm.OLS(values, np.ones((len(values), 1)))
    cr0 = model.fit(cov_type="cluster", cov_kwds={"groups": groups, "use_correction": False})
    cr1 = model.fit(cov_type="cluster", cov_kwds={"groups": groups})
    assert clustered["se_cr0"] == pytest.approx(float(cr0.bse[0]), rel=1e-9)
    assert clustered["se"] == pytest.approx(float(cr1.bse[0]), rel=1e-9)
    assert (round(clustered["se_cr0"], 3), round(clustered["se"], 3)) == (0.154, 0.178)
    assert clustered["se_independent"] == pytest.approx(math.sqrt(0.7 * 0.3 / 80))
    half = stats.t.ppf(0.975, 3) * float(cr1.bse[0])
    assert clustered["ci"]["low"] == pytest.approx(0.7 - half)
    assert clustered["ci"]["high"] == 1.0  # 0.7 + half, clipped
    assert clustered["df"] == 3
    # Every composite is 1 (passed) or 0: the same figures.
    composite = report["tiers"]["T1"]["analysis"]["composite_mean_clustered"]
    assert composite["se"] == pytest.approx(clustered["se"])
    # A single-scenario row has nothing to cluster.
    assert report["tiers"]["T1"]["scenarios"]["s1"]["analysis"]["pass_rate_clustered"] is None


def test_both_questions_match_scipy_and_statsmodels(submitted: tuple[dict[str, Any], str]) -> None:
    report, _ = submitted
    across = report["tiers"]["T1"]["analysis"]["across_scenarios"]
    assert report["tiers"]["T0"]["analysis"]["across_scenarios"] is None  # the baseline

    # On scenarios like these: paired per-scenario differences, t on 3 df.
    rates = {t: [k / RUNS for k in PASSES[t]] for t in PASSES}
    paired = stats.ttest_rel(rates["T1"], rates["T0"])
    interval = paired.confidence_interval(0.95)
    like = across["like_these"]
    assert like["question"] == "on scenarios like these"
    rate = like["pass_rate"]
    assert rate["mean"] == pytest.approx(0.2)
    assert rate["se"] == pytest.approx(np.std(np.subtract(rates["T1"], rates["T0"]), ddof=1) / 2)
    assert rate["p"] == pytest.approx(paired.pvalue, rel=1e-8)
    assert (rate["ci"]["low"], rate["ci"]["high"]) == (
        pytest.approx(interval.low, abs=1e-9),
        pytest.approx(interval.high, abs=1e-9),
    )
    assert (round(rate["se"], 3), round(rate["p"], 2), rate["df"]) == (0.178, 0.34, 3)
    assert (round(rate["ci"]["low"], 2), round(rate["ci"]["high"], 2)) == (-0.37, 0.77)
    assert like["too_few_scenarios"] is True
    assert like["verdict"] == "no significant difference"

    # On these scenarios: stratified by scenario.
    table = _t1_against_t0()
    these = across["these_scenarios"]
    assert these["question"] == "on these scenarios"
    assert these["cmh"] == pytest.approx(table.test_null_odds().statistic)
    assert these["cmh_p"] == pytest.approx(table.test_null_odds().pvalue, rel=1e-9)
    assert these["cmh_p_continuity"] == pytest.approx(
        table.test_null_odds(correction=True).pvalue, rel=1e-9
    )
    assert (round(these["cmh_p"], 4), round(these["cmh_p_continuity"], 4)) == (0.0072, 0.0118)
    assert these["risk_difference"] == pytest.approx(0.2)
    # Its interval: Sato, Greenland & Robins' variance, the published formula (23/4000).
    rd, variance = sato_risk_difference(
        [(a, RUNS, b, RUNS) for a, b in zip(PASSES["T1"], PASSES["T0"], strict=True)]
    )
    half = stats.norm.ppf(0.975) * math.sqrt(variance)
    risk = these["risk_difference_ci"]
    assert (risk["low"], risk["high"]) == (
        pytest.approx(float(rd) - half, abs=1e-12),
        pytest.approx(float(rd) + half, abs=1e-12),
    )
    assert (round(risk["low"], 3), round(risk["high"], 3)) == (0.051, 0.349)
    # Pass or fail in equal strata: van Elteren's test is the CMH test.
    assert these["van_elteren_p"] == pytest.approx(these["cmh_p"])
    assert these["verdict"] == "better"
    # The tier's verdict is this question's, and says so.
    tier = report["tiers"]["T1"]["analysis"]["vs_baseline"]
    assert (tier["verdict"], tier["verdict_from"]) == (
        "better",
        "CMH and van Elteren on these 4 scenarios",
    )

    # The four tests of the family, Holm-adjusted as the run-level ones are.
    raw = [these["cmh_p"], these["van_elteren_p"], rate["p"], like["composite"]["p"]]
    adjusted = [
        these["cmh_p_adjusted"],
        these["van_elteren_p_adjusted"],
        rate["p_adjusted"],
        like["composite"]["p_adjusted"],
    ]
    assert adjusted == pytest.approx(list(multipletests(raw, method="holm")[1]))
    assert report["multiplicity_across_scenarios"]["tests"] == 4

    # Heterogeneity: Breslow-Day, and the scenario T1 made worse.
    heterogeneity = across["heterogeneity"]
    expected = table.test_equal_odds()
    assert heterogeneity["statistic"] == pytest.approx(expected.statistic)
    assert heterogeneity["p"] == pytest.approx(expected.pvalue, rel=1e-6)
    assert heterogeneity["df"] == 3
    assert heterogeneity["opposite"] == ["s4"]
    assert heterogeneity["significant_opposite"] == []  # 6 of 20 against 10: not alone

    # Planning at the correlation observed: T1's and T0's implied ones (T0's 0), 4 x 20.
    plan = across["planning"]
    icc = report["tiers"]["T1"]["analysis"]["pass_rate_clustered"]["icc"] / 2
    assert plan["icc"] == pytest.approx(icc)
    level = 0.05 / 4
    z = stats.norm.ppf(1 - level / 2) + stats.norm.ppf(0.8)
    assert plan["these_scenarios"] == pytest.approx(z * math.sqrt(0.5 * (1 - icc) / 80))


def test_the_words_name_both_questions_and_the_scenario_made_worse(
    submitted: tuple[dict[str, Any], str], fleet_env: dict[str, str]
) -> None:
    report, _ = submitted
    exp_id = report["experiment"]["id"]
    for fmt in ("markdown", "table", "html"):
        full = ["--full"] if fmt == "table" else []  # the terminal's default is one screen
        shown = run_cli(
            "report", exp_id, "--format", fmt, *full, env={**fleet_env, "COLUMNS": "250"}
        )
        assert shown.returncode == 0, shown.stderr
        text = " ".join(shown.stdout.split())
        assert "on these scenarios" in text and "on scenarios like these" in text, fmt
        assert (
            "T1: better on these 4 scenarios; not shown to carry over to others (on scenarios "
            "like these): 4 scenarios are too few to generalise from" in text
        ), fmt
        assert (
            "T1: better on these scenarios overall, but worse on s4 (0.300 against 0.500), "
            "not significant alone" in text
        ), fmt
        assert "Breslow-Day" in text and "0.154" in text and "0.178" in text, fmt


def test_validate_says_what_each_question_can_detect(
    submitted: tuple[dict[str, Any], str], fleet_env: dict[str, str]
) -> None:
    _, matrix = submitted
    shown = run_cli("validate", matrix, "--icc", "0.42", env=fleet_env)
    assert shown.returncode == 0, shown.stderr
    assert "intra-scenario correlation 0.42 assumed" in shown.stdout
    # the 20 points it found, near the limit
    assert "on these scenarios: a difference of 2" in shown.stdout
    assert "4 scenarios are too few to generalise from" in shown.stdout


def test_csv_and_github_carry_the_figures(
    submitted: tuple[dict[str, Any], str], fleet_env: dict[str, str]
) -> None:
    report, _ = submitted
    exp_id = report["experiment"]["id"]
    shown = run_cli("report", exp_id, "--format", "csv", env=fleet_env)
    assert shown.returncode == 0, shown.stderr
    rows = {(r["tier"], r["scenario"]): r for r in csv.DictReader(io.StringIO(shown.stdout))}
    t1 = rows["T1", ""]
    values = np.array([x for cell in _outcomes("T1") for x in cell])
    cr1 = (
        sm.OLS(values, np.ones((len(values), 1)))
        .fit(cov_type="cluster", cov_kwds={"groups": np.repeat(np.arange(4), RUNS)})
        .bse[0]
    )
    assert float(t1["pass_rate_clustered_se"]) == pytest.approx(float(cr1), rel=1e-9)
    table = _t1_against_t0()
    assert float(t1["these_scenarios_cmh_p"]) == pytest.approx(
        table.test_null_odds().pvalue, rel=1e-9
    )
    paired = stats.ttest_rel(PASSES["T1"], PASSES["T0"])
    assert float(t1["like_these_pass_rate_p"]) == pytest.approx(paired.pvalue, rel=1e-8)
    assert float(t1["like_these_pass_rate_difference"]) == pytest.approx(0.2)
    assert float(t1["heterogeneity_p"]) == pytest.approx(table.test_equal_odds().pvalue, rel=1e-6)
    assert (t1["vs_baseline_verdict"], t1["vs_baseline_pooled_verdict"]) == (
        "better",
        "no significant difference",  # Fisher's 0.015, Holm-adjusted over 10 tests
    )
    # A scenario row has none of the section's figures.
    assert rows["T1", "s1"]["these_scenarios_cmh_p"] == ""
    assert rows["T1", "s1"]["pass_rate_clustered_se"] == ""

    github = run_cli("report", exp_id, "--format", "github", env=fleet_env)
    assert github.returncode == 0, github.stderr
    text = github.stdout
    assert text.splitlines()[0] == (
        "**✅ Against baseline T0: T1 better** (CMH and van Elteren on these 4 scenarios; "
        "Holm-corrected across the 4 across-scenario tests, alpha 0.05)"
    )
    section = text.split(
        "**Across scenarios: against T0 on these scenarios and on scenarios like these**"
    )[1].split("<details>")[0]
    row = next(line for line in section.splitlines() if line.startswith("| T1 |"))
    assert "| 0.700 SE 0.178 [" in row and "| +0.200 [-0.366, +0.766] SE 0.178 |" in row
    assert (
        "T1: better on these 4 scenarios; not shown to carry over to others (on scenarios "
        "like these): 4 scenarios are too few to generalise from" in section
    )
    assert "worse on s4 (0.300 against 0.500)" in section


# Three scenarios, six runs a cell; run i of a cell passes when i < its count.
RESUMED = {"T0": (2, 2, 2), "T1": (6, 2, 1)}
RESUMED_AGENT = (
    'case "$EVALFLEET_TIER/$EVALFLEET_SCENARIO" in T1/s1) k=6;; T1/s3) k=1;; *) k=2;; esac; '
    'if [ "$EVALFLEET_RUN_INDEX" -lt "$k" ]; then touch out.txt; fi'
)


def _resumable(folder: Path, agent: str) -> Path:
    gates = "{gates: [{type: file_exists, path: out.txt}]}"
    scenarios = "\n".join(f"  - {{id: s{i}, prompt: go, evaluation: {gates}}}" for i in (1, 2, 3))
    path = folder / "matrix.yaml"
    path.write_text(
        f"name: resumed\nruns_per_tier: 6\n"
        f"agent: {{kind: command, command: {json.dumps(agent)}, timeout_s: 30}}\n"
        f"tiers: [{{id: T0}}, {{id: T1}}]\nscenarios:\n{scenarios}\n"
    )
    return path


@pytest.mark.parametrize("ran", [4, 0])
def test_resume_plans_at_the_correlation_of_the_runs_so_far(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path, ran: int
) -> None:
    """An experiment stopped part-way, `ran` runs of each cell done: resume says what the
    whole matrix can detect, as validate does, at the intra-scenario correlation those
    runs showed (each tier's implied one, averaged, as a report plans); with none to
    measure it from, at the one validate assumes, saying so."""
    from worker.run import execute

    matrix = _resumable(tmp_path, RESUMED_AGENT)
    submitted = run_cli("submit", str(matrix), env=fleet_env)  # no worker yet: all queued
    assert submitted.returncode == 0, submitted.stderr
    exp_id = submitted.stdout.strip()
    passes = {(t, f"s{i}"): k for t, counts in RESUMED.items() for i, k in enumerate(counts, 1)}
    for spec in store.specs.all(exp_id):
        if spec.run_index < ran:  # as if a worker had taken them before the stop
            passed = spec.run_index < passes[spec.tier, spec.scenario]
            assert execute(spec, store).passed == passed
    try:
        resumed = run_cli("resume", exp_id, env=fleet_env)
        assert resumed.returncode == 0, resumed.stderr
        shown = planning_lines(resumed.stderr)
    finally:  # the queued runs run, so that nothing of this test is left in the queue
        start_worker(concurrency=2)
        wait_until(lambda: store.reports.get(exp_id), "the resumed experiment's report", 120)
    counted = 2 * 3 * ran
    if ran:
        outcomes = {
            tier: [[float(i < k) for i in range(ran)] for k in passes]
            for tier, passes in RESUMED.items()
        }
        icc = (implied_icc(outcomes["T0"]) + implied_icc(outcomes["T1"])) / 2
        assert 0 < icc < 1
        said = f"{icc:.2f} observed in the {counted} counted runs so far"
        at = repr(icc)
    else:
        said = (
            "0.3 assumed: the 0 counted runs so far are too few to measure it (it needs runs "
            "of a tier in two scenarios or more, more than one a scenario, not all alike)"
        )
        at = "0.3"
    assert "3 scenarios x 6 runs a tier" in shown[0]
    assert f"intra-scenario correlation {said}, design effect" in shown[0], shown[0]
    # The very lines validate prints at that correlation, but for where it came from.
    validated = run_cli("validate", str(matrix), "--icc", at, env=fleet_env)
    assert validated.returncode == 0, validated.stderr
    expected = planning_lines(validated.stdout)
    expected[0] = expected[0].replace(f"{float(at):g} assumed (--icc; a report measures it)", said)
    assert shown == expected
