"""Verdicts that hold, end to end: experiments finished in Redis by the workers' own
aggregation, read through `scheduler report` and `scheduler compare`.

Every test of a report is corrected with the others (matrix `report:` or
--correction), raw and adjusted p-values are in every format and match
statsmodels on the same inputs, effect sizes and detectable differences sit
beside each test, the Scylla cross-tier figures match a hand computation, and
`--format github` opens with its verdict line. A tier with two scenarios takes
its verdict from the tests stratified by scenario, recomputed here from the
seeded runs (statsmodels' StratifiedTable, scipy's ranks and paired t).
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import StratifiedTable

from core.store import Store
from tests.conftest import PREFIX, run_cli
from tests.support.experiments import Cell, impl_rate, seed_experiment
from tests.support.oracles import multipletests

pytestmark = pytest.mark.integration

RUNS = 10


def _passing(passes: int) -> tuple[bool, ...]:
    return tuple(i < passes for i in range(RUNS))


# T1 far better than T0 in both scenarios; T2 somewhat better, significantly so alone
# (van Elteren's raw p 0.012), under Benjamini-Hochberg (0.031) but not under Holm
# (0.071).
FAMILY = {
    ("T0", "s1"): Cell(_passing(3)),
    ("T0", "s2"): Cell(_passing(3)),
    ("T1", "s1"): Cell(_passing(10)),
    ("T1", "s2"): Cell(_passing(10)),
    ("T2", "s1"): Cell(_passing(4)),
    ("T2", "s2"): Cell(_passing(8)),
}
# s2 is easy for both tiers; on s1 T1 passes 6 of 10 where T0 passes none. Pooled over
# both scenarios, 16/20 against 10/20 is no significant difference; within them it is.
STRATA = {
    ("T0", "s1"): Cell(_passing(0)),
    ("T0", "s2"): Cell(_passing(10)),
    ("T1", "s1"): Cell(_passing(6)),
    ("T1", "s2"): Cell(_passing(10)),
}
# The hand-computed example of tests.unit.core.metrics.test_formulas_cross_tier, four runs a tier.
HAND = {
    ("T0", "s"): Cell((True, False, False, False), impls=(0.8, 0.2, 0.2, 0.4), cost=1.0),
    ("T1", "s"): Cell((True, True, True, False), impls=(1.0, 1.0, 0.8, 0.6), cost=2.0),
    ("T2", "s"): Cell((False,) * 4, impls=(0.0,) * 4, cost=0.5),
}
METHODS = {"holm": "holm", "bh": "fdr_bh"}


@pytest.fixture(scope="module")
def experiments(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    store = Store.from_url(redis_url, prefix=PREFIX)
    folder = tmp_path_factory.mktemp("matrices")
    one = {("T0", "s"): Cell(_passing(5)), ("T1", "s"): Cell(_passing(9))}
    broken = {("T0", "s"): Cell(_passing(5)), ("T1", "s"): Cell(_passing(1))}
    return {
        "family": seed_experiment(
            store, folder, FAMILY, name="family", matrix_keys={"report": {"correction": "bh"}}
        ),
        "default": seed_experiment(store, folder, FAMILY, name="default"),
        "hand": seed_experiment(store, folder, HAND, name="hand"),
        "strata": seed_experiment(store, folder, STRATA, name="strata"),
        "before": seed_experiment(store, folder, one),
        "broken": seed_experiment(store, folder, broken),
        "slipped": seed_experiment(
            store, folder, {("T0", "s"): Cell(_passing(5)), ("T1", "s"): Cell(_passing(8))}
        ),
    }


def _cli(env: dict[str, str], *args: str) -> str:
    result = run_cli(*args, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _tests(report: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(tier, scenario, vs_baseline) of every row that is tested, tier rows first."""
    rows = []
    for tier_id, tier in report["tiers"].items():
        for scope, cell in [("(all)", tier), *tier["scenarios"].items()]:
            if cell["analysis"]["vs_baseline"] is not None:
                rows.append((tier_id, scope, cell["analysis"]["vs_baseline"]))
    return rows


def _composites(cell: Cell) -> list[float]:
    """The composite scores seed_experiment gives a cell's runs."""
    return [0.5 * p + 0.5 * impl_rate(p, i) for i, p in enumerate(cell.passed)]


def _van_elteren_p(strata: list[tuple[list[float], list[float]]]) -> tuple[float, float]:
    """(z, two-sided p): each stratum's rank sum weighted by 1 / (N + 1), scipy's ranks."""
    statistic = variance = 0.0
    for x, y in strata:
        n, m = len(x), len(y)
        ranks = stats.rankdata([*x, *y])
        weight = 1 / (n + m + 1)
        statistic += weight * (ranks[:n].sum() - n * (n + m + 1) / 2)
        variance += weight**2 * n * m * (n + m + 1) / 12 * stats.tiecorrect(ranks)
    z = statistic / math.sqrt(variance)
    return z, 2 * stats.norm.sf(abs(z))


def _stratified(cells: dict[tuple[str, str], Cell], correction: str) -> dict[str, str]:
    """Each tier's verdict on these scenarios against T0: CMH and van Elteren, in a family
    with the paired t's two tests per tier, corrected as the report's are."""
    tiers = list(dict.fromkeys(t for t, _ in cells if t != "T0"))
    raw, signs = [], []
    for tier in tiers:
        ours = [cells[tier, s] for s in ("s1", "s2")]
        base = [cells["T0", s] for s in ("s1", "s2")]
        counts = [
            [[sum(a.passed), RUNS - sum(a.passed)], [sum(b.passed), RUNS - sum(b.passed)]]
            for a, b in zip(ours, base, strict=True)
        ]
        cmh = StratifiedTable(np.array(counts, dtype=float).transpose(1, 2, 0))
        z, ranks_p = _van_elteren_p(
            [(_composites(a), _composites(b)) for a, b in zip(ours, base, strict=True)]
        )
        rate = _paired_p([sum(a.passed) for a in ours], [sum(b.passed) for b in base])
        composite = _paired_p(
            [float(np.mean(_composites(a))) for a in ours],
            [float(np.mean(_composites(b))) for b in base],
        )
        raw += [cmh.test_null_odds().pvalue, ranks_p, rate, composite]
        difference = sum(sum(a.passed) - sum(b.passed) for a, b in zip(ours, base, strict=True))
        signs.append((difference, z))
    adjusted = raw if correction == "none" else multipletests(raw, method=METHODS[correction])[1]
    verdicts = {}
    for i, (tier, (difference, z)) in enumerate(zip(tiers, signs, strict=True)):
        cmh_p, ranks_p = adjusted[4 * i], adjusted[4 * i + 1]
        better = (cmh_p < 0.05 and difference > 0) or (ranks_p < 0.05 and z > 0)
        assert not ((cmh_p < 0.05 and difference < 0) or (ranks_p < 0.05 and z < 0))
        verdicts[tier] = "better" if better else "no significant difference"
    return verdicts


def _paired_p(ours: list[float], base: list[float]) -> float:
    """scipy's paired t; with every difference the same (no spread, no t), the exact
    sign test's, all n on one side."""
    differences = np.subtract(ours, base)
    if np.ptp(differences) == 0:
        n = len(differences)
        return 1.0 if differences[0] == 0 else float(stats.binomtest(n, n).pvalue)
    return float(stats.ttest_rel(ours, base).pvalue)


def _check_family(report: dict[str, Any], correction: str, alpha: float = 0.05) -> None:
    rows = _tests(report)
    raw = [p for _, _, c in rows for p in (c["fisher_p"], c["mann_whitney_p"])]
    adjusted = [
        p for _, _, c in rows for p in (c["fisher_p_adjusted"], c["mann_whitney_p_adjusted"])
    ]
    expected = (
        raw if correction == "none" else list(multipletests(raw, method=METHODS[correction])[1])
    )
    assert adjusted == pytest.approx(expected, abs=1e-12)
    assert report["multiplicity"]["correction"] == correction
    assert report["multiplicity"]["tests"] == len(raw) == 12
    assert report["multiplicity_across_scenarios"]["tests"] == 8
    stratified = _stratified(FAMILY, correction)
    for tier, scope, c in rows:
        # Fisher's and Mann-Whitney's verdict is read from their adjusted p-values ...
        significant = min(c["fisher_p_adjusted"], c["mann_whitney_p_adjusted"]) < alpha
        pooled = "better" if significant else "no significant difference"
        if scope != "(all)":
            assert (c["verdict"], c["verdict_from"], c["pooled_verdict"]) == (pooled, None, None)
            continue
        # ... but a tier's, with two scenarios, from the stratified tests.
        assert c["pooled_verdict"] == pooled
        assert c["verdict"] == stratified[tier]
        assert c["verdict_from"] == "CMH and van Elteren on these 2 scenarios"


def test_the_matrix_chooses_the_correction_and_the_cli_can_redo_it(
    experiments: dict[str, str], fleet_env: dict[str, str]
) -> None:
    family = experiments["family"]
    report = json.loads(_cli(fleet_env, "report", family, "--format", "json"))
    assert report["multiplicity"] == {
        "correction": "bh",
        "alpha": 0.05,
        "tests": 12,
        "lone_test_alpha": pytest.approx(0.05 / 12),
    }
    _check_family(report, "bh")
    # Without `report:` in the matrix, Holm.
    _check_family(
        json.loads(_cli(fleet_env, "report", experiments["default"], "--format", "json")), "holm"
    )
    for correction in ("holm", "none"):
        redone = json.loads(
            _cli(fleet_env, "report", family, "--format", "json", "--correction", correction)
        )
        _check_family(redone, correction)

    # T2 (12/20 against 6/20) is better alone and under BH's false discovery rate, not
    # under Holm's family-wise error rate: the correction decides, and says so. Its
    # verdict is van Elteren's (raw p 0.012); CMH alone (0.058) finds nothing.
    def t2(correction: str) -> dict[str, Any]:
        redone = _cli(fleet_env, "report", family, "--format", "json", "--correction", correction)
        return json.loads(redone)["tiers"]["T2"]["analysis"]

    assert report["tiers"]["T2"]["analysis"]["vs_baseline"]["verdict"] == "better"
    assert t2("none")["vs_baseline"]["verdict"] == "better"
    held = t2("holm")
    assert held["vs_baseline"]["verdict"] == "no significant difference"
    these = held["across_scenarios"]["these_scenarios"]
    assert round(these["van_elteren_p"], 3) == 0.012 and round(these["cmh_p"], 3) == 0.058
    assert held["vs_baseline"]["detectable"]["alpha"] == pytest.approx(0.05 / 12)
    # Stricter alpha: T1 too is judged at the family's level.
    strict = json.loads(_cli(fleet_env, "report", family, "--format", "json", "--alpha", "1e-9"))
    assert strict["multiplicity"]["correction"] == "bh"  # kept from the stored report
    assert all(c["verdict"] == "no significant difference" for _, _, c in _tests(strict))


def test_every_format_shows_raw_and_adjusted_p_and_effect_sizes(
    experiments: dict[str, str], fleet_env: dict[str, str]
) -> None:
    family = experiments["default"]
    report = json.loads(_cli(fleet_env, "report", family, "--format", "json"))
    t2 = report["tiers"]["T2"]["analysis"]["vs_baseline"]
    fisher = f"{t2['fisher_p']:.3f}"
    fisher_adjusted = f"{t2['fisher_p_adjusted']:.3f}"
    risk = t2["risk_difference_ci"]
    cliff = t2["cliffs_delta_ci"]
    # From 6/20 at the level of one test in twelve, even a fall to 0 would go unseen.
    assert t2["detectable"]["regression"] is None
    # The tier's verdict names the tests it came from; a scenario row's says what its
    # runs could have seen, in points of pass rate.
    stratified = "no significant difference (CMH and van Elteren on these 2 scenarios)"
    s1 = report["tiers"]["T2"]["scenarios"]["s1"]["analysis"]["vs_baseline"]
    assert s1["detectable"]["regression"] is None
    undetected = (
        f"no significant difference (could detect a rise of "
        f"{s1['detectable']['improvement'] * 100:.0f} points or more in pass rate; not a fall)"
    )

    markdown = _cli(fleet_env, "report", family, "--format", "markdown")
    section = markdown.split("## Confidence and significance against the baseline (T0)")[1]
    row = next(line for line in section.splitlines() if line.startswith("| T2 | (all) |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    significance = cells[4:]
    assert significance[:4] == [
        "+0.300",
        fisher,
        fisher_adjusted,
        f"[{risk['low']:+.3f}, {risk['high']:+.3f}]",
    ]
    assert (
        significance[7] == f"{t2['cliffs_delta']:+.3f} [{cliff['low']:+.3f}, {cliff['high']:+.3f}]"
    )
    assert significance[8] == stratified
    s1_row = next(line for line in section.splitlines() if line.startswith("| T2 | s1 |"))
    assert s1_row.endswith(f"| {undetected} |")
    assert (
        "p adj.: Holm-corrected across the 12 run-level tests (family-wise error rate 0.05)"
        in markdown
    )
    assert "a tier with two or more scenarios takes its verdict from the tests stratified" in (
        " ".join(markdown.split())
    )

    terminal = " ".join(_cli({**fleet_env, "COLUMNS": "250"}, "report", family, "--full").split())
    assert "p adj." in terminal and "Holm-corrected across the 12 run-level tests" in terminal
    assert stratified in terminal and undetected in terminal

    page = " ".join(html.unescape(_cli(fleet_env, "report", family, "--format", "html")).split())
    assert "Fisher p adj." in page and stratified in page and undetected in page

    rows = list(csv.DictReader(io.StringIO(_cli(fleet_env, "report", family, "--format", "csv"))))
    t2_row = next(r for r in rows if (r["tier"], r["scenario"]) == ("T2", ""))
    assert float(t2_row["vs_baseline_fisher_p"]) == pytest.approx(t2["fisher_p"])
    assert float(t2_row["vs_baseline_fisher_p_adjusted"]) == pytest.approx(t2["fisher_p_adjusted"])
    assert float(t2_row["vs_baseline_risk_difference_ci_low"]) == pytest.approx(risk["low"])
    assert float(t2_row["detectable_improvement"]) == pytest.approx(t2["detectable"]["improvement"])
    assert t2_row["detectable_regression"] == ""  # none detectable

    github = _cli(fleet_env, "report", family, "--format", "github")
    assert f"| {fisher} / {fisher_adjusted} |" in github


def test_github_format_opens_with_the_verdict(
    experiments: dict[str, str], fleet_env: dict[str, str]
) -> None:
    family = experiments["default"]
    github = _cli(fleet_env, "report", family, "--format", "github")
    lines = github.splitlines()
    assert lines[0] == (
        "**✅ Against baseline T0: T1 better, T2 no significant difference** "
        "(CMH and van Elteren on these 2 scenarios; Holm-corrected across the 8 "
        "across-scenario tests, alpha 0.05)"
    )
    # Each count is named with its family, the same words in the headline and the notes.
    assert "p adj.: Holm-corrected across the 12 run-level tests" in github
    assert "Holm-corrected across the 8 across-scenario tests (four per tier)" in github
    assert lines[2].startswith(f"default ({family}): complete, 60/60 runs")
    bh = _cli(fleet_env, "report", experiments["family"], "--format", "github")
    assert bh.splitlines()[0] == (
        "**✅ Against baseline T0: T1 better, T2 better** (CMH and van Elteren on these 2 "
        "scenarios; Benjamini-Hochberg-corrected across the 8 across-scenario tests, alpha 0.05)"
    )
    tier_rows = [line for line in lines if re.match(r"\| T\d \|", line)]
    assert [r.split(" | ")[0] for r in tier_rows[:3]] == ["| T0", "| T1", "| T2"]
    assert "| baseline |" in tier_rows[0]
    # Scenarios fold away; every one of them is there.
    assert "<details><summary>Per scenario (4 rows of tier x scenario)</summary>" in github
    assert sum(1 for line in lines if re.match(r"\| T[12] \| s[12] \|", line)) == 4
    assert "frontier cost of pass" in github
    # Short enough for a pull-request comment (65,536 characters).
    assert len(github) < 10_000


def test_a_tier_is_judged_within_its_scenarios_and_the_pooled_verdict_said_beside(
    experiments: dict[str, str], fleet_env: dict[str, str]
) -> None:
    strata = experiments["strata"]
    report = json.loads(_cli(fleet_env, "report", strata, "--format", "json"))
    t1 = report["tiers"]["T1"]["analysis"]
    assert _stratified(STRATA, "holm") == {"T1": "better"}
    assert t1["vs_baseline"]["verdict"] == "better"
    assert t1["vs_baseline"]["fisher_p_adjusted"] > 0.05
    assert t1["vs_baseline"]["mann_whitney_p_adjusted"] > 0.05
    assert t1["vs_baseline"]["pooled_verdict"] == "no significant difference"
    said = (
        "T1: better (CMH and van Elteren on these 2 scenarios); pooled over its runs, "
        "Fisher and Mann-Whitney say no significant difference"
    )
    for fmt in ("markdown", "table", "html", "github"):
        full = ["--full"] if fmt == "table" else []  # the terminal's default is one screen
        shown = _cli({**fleet_env, "COLUMNS": "250"}, "report", strata, "--format", fmt, *full)
        assert said in " ".join(html.unescape(shown).split()), fmt
    github = _cli(fleet_env, "report", strata, "--format", "github")
    assert github.splitlines()[0] == (
        "**✅ Against baseline T0: T1 better** (CMH and van Elteren on these 2 scenarios; "
        "Holm-corrected across the 4 across-scenario tests, alpha 0.05)"
    )
    assert "| better (CMH and van Elteren on these 2 scenarios) |" in github
    rows = list(csv.DictReader(io.StringIO(_cli(fleet_env, "report", strata, "--format", "csv"))))
    tier_row = next(r for r in rows if (r["tier"], r["scenario"]) == ("T1", ""))
    assert tier_row["vs_baseline_verdict"] == "better"


def test_scylla_cross_tier_figures_match_the_hand_computation(
    experiments: dict[str, str], fleet_env: dict[str, str]
) -> None:
    hand = experiments["hand"]
    report = json.loads(_cli(fleet_env, "report", hand, "--format", "json"))
    cross = report["cross_tier"]
    assert cross["frontier_cost_of_pass"] == pytest.approx(2 / 0.75)
    assert cross["frontier_tier"] == "T1" and cross["best_value_tier"] == "T1"
    assert cross["impl_rate_variance"] == pytest.approx(0.14)
    assert cross["uplift"]["T1"] == pytest.approx(
        {"pass_rate": 2.0, "impl_rate": 2.0, "composite": 0.8 / 0.15, "cost_change": 1.0}
    )
    assert cross["uplift"]["T2"] == pytest.approx(
        {"pass_rate": -1.0, "impl_rate": -1.0, "composite": -1.0, "cost_change": -0.5}
    )
    tiers = report["tiers"]
    assert [tiers[t]["consistency"] for t in ("T0", "T1", "T2")] == pytest.approx(
        [0.0, 0.635565, 1.0], abs=1e-6
    )
    markdown = _cli(fleet_env, "report", hand, "--format", "markdown")
    table = markdown.split("## Cross-tier against the baseline (T0)")[1].split("\n## ")[0]
    assert "| T0 | baseline | baseline | baseline | baseline | 0.000 | 4.0000 |" in table
    assert "| T1 | +200.0% | +200.0% | +533.3% | +100.0% | 0.636 | 2.6667 |" in table
    assert "| T2 | -100.0% | -100.0% | -100.0% | -50.0% | 1.000 | no pass |" in table
    assert "frontier cost of pass $2.6667 (T1, the cheapest tier per pass)" in table
    assert "best value: T1" in table
    assert "variance of the tiers' median impl rate 0.1400" in table


def test_compare_github_gates_on_the_corrected_verdict(
    experiments: dict[str, str], fleet_env: dict[str, str]
) -> None:
    a, b = experiments["before"], experiments["broken"]
    gate = run_cli("compare", a, b, "--fail-on-regression", "--format", "github", env=fleet_env)
    assert gate.returncode == 1
    assert gate.stdout.splitlines()[0] == (
        f"**❌ Regression: T1 significantly worse in {b} than in {a}** "
        "(Holm-corrected across the 4 run-level tests, alpha 0.05)"
    )
    assert "<details>" not in gate.stdout  # one scenario: its rows are the tiers'
    fine = run_cli("compare", a, a, "--fail-on-regression", "--format", "github", env=fleet_env)
    assert fine.returncode == 0, fine.stderr
    assert fine.stdout.startswith(f"**✅ No regression: no tier significantly worse in {a}")
    assert "can detect" not in fine.stdout
    # A fall too small for these runs to detect is said under the verdict line.
    slipped = experiments["slipped"]
    unseen = run_cli(
        "compare", a, slipped, "--fail-on-regression", "--format", "github", env=fleet_env
    )
    assert unseen.returncode == 0, unseen.stderr
    lines = unseen.stdout.splitlines()
    assert lines[0].startswith("**✅ No regression")
    assert lines[2].startswith("⚠️ fell by less than these runs can detect: T1 ")
    assert "T0" not in lines[2]


def test_bad_corrections_are_clear_errors(
    experiments: dict[str, str], fleet_env: dict[str, str], tmp_path: Path
) -> None:
    bad_flag = run_cli("report", experiments["family"], "--correction", "bonferroni", env=fleet_env)
    assert bad_flag.returncode == 2 and "--correction" in bad_flag.stderr
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        "name: m\nagent: {kind: command, command: 'true'}\ntiers: [{id: T0}]\n"
        "scenarios: [{id: s, prompt: go}]\nreport: {correction: bonferroni, alpha: 0.05}\n"
    )
    result = run_cli("validate", str(matrix), env=fleet_env)
    assert result.returncode == 2
    assert "matrix.yaml" in result.stderr and "report.correction" in result.stderr
    assert "holm" in result.stderr
