"""`scheduler compare A B`, end to end: finished experiments in Redis, the CLI, exit codes."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import StratifiedTable
from statsmodels.stats.proportion import confint_proportions_2indep

from core.store import Store
from tests.conftest import PREFIX, run_cli
from tests.support.clusters import implied_icc
from tests.support.experiments import Cell, seed_experiment
from tests.support.oracles import multipletests

pytestmark = pytest.mark.integration


def _seed(
    store: Store, folder: Path, t0: int, t1: int, tiers: tuple[str, str] = ("T0", "T1")
) -> str:
    """Two tiers, one scenario, ten runs each: `t0` and `t1` of them pass."""
    cells = {
        (tiers[0], "s"): Cell(tuple(i < t0 for i in range(10))),
        (tiers[1], "s"): Cell(tuple(i < t1 for i in range(10))),
    }
    return seed_experiment(store, folder, cells)


@pytest.fixture(scope="module")
def experiments(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    store = Store.from_url(redis_url, prefix=PREFIX)
    folder = tmp_path_factory.mktemp("matrices")
    return {
        "before": _seed(store, folder, 5, 9),
        "same": _seed(store, folder, 5, 9),
        "broken": _seed(store, folder, 5, 1),  # T1: 9/10 -> 1/10
        "slipped": _seed(store, folder, 5, 5),  # T1: 9/10 -> 5/10, p between 0.01 and 0.05
        "other": _seed(store, folder, 5, 9, tiers=("X0", "X1")),
        "two_before": seed_experiment(store, folder, TWO_BEFORE),
        "two_after": seed_experiment(store, folder, TWO_AFTER),
        "s1_only": seed_experiment(store, folder, {("T1", "s1"): SIX_OF_TEN}),
        "s1_and_new": seed_experiment(
            store, folder, {("T1", "s1"): SIX_OF_TEN, ("T1", "s3"): Cell((False,) * 10)}
        ),
        "s9_only": seed_experiment(store, folder, {("T1", "s9"): SIX_OF_TEN}),
    }


# One tier in two scenarios: s2 easy before and after; on s1 T1 went from 6 of 10 to
# none. Pooled, 16/20 -> 10/20 is no significant difference; within the scenarios a loss.
TWO_BEFORE = {
    ("T1", "s1"): Cell(tuple(i < 6 for i in range(10))),
    ("T1", "s2"): Cell((True,) * 10),
}
TWO_AFTER = {("T1", "s1"): Cell((False,) * 10), ("T1", "s2"): Cell((True,) * 10)}
SIX_OF_TEN = Cell(tuple(i < 6 for i in range(10)))


def test_tiers_with_the_same_scenarios_are_compared_scenario_by_scenario(
    experiments: dict[str, str], fleet_env: dict[str, str]
) -> None:
    a, b = experiments["two_before"], experiments["two_after"]
    shown = run_cli("compare", a, b, "--format", "json", env=fleet_env)
    assert shown.returncode == 0, shown.stderr
    result = json.loads(shown.stdout)
    t1 = result["tiers"]["T1"]
    assert t1["fisher_p_adjusted"] > 0.05 and t1["mann_whitney_p_adjusted"] > 0.05
    assert t1["pooled_verdict"] == "no significant difference"
    assert (t1["verdict"], t1["verdict_from"]) == (
        "worse",
        "CMH and van Elteren on these 2 scenarios",
    )
    assert result["regressions"] == ["T1"]
    across = result["across_scenarios"]["T1"]
    assert across["reference"] == a
    table = StratifiedTable(
        np.array([[[0, 10], [6, 4]], [[10, 0], [10, 0]]], dtype=float).transpose(1, 2, 0)
    )
    these = across["these_scenarios"]
    assert these["cmh_p"] == pytest.approx(table.test_null_odds().pvalue, rel=1e-9)
    assert these["risk_difference"] == pytest.approx(-0.3)
    # The paired per-scenario difference, B - A: (0 - 0.6, 1 - 1).
    paired = stats.ttest_rel([0.0, 1.0], [0.6, 1.0])
    rate = across["like_these"]["pass_rate"]
    assert rate["mean"] == pytest.approx(-0.3)
    assert rate["p"] == pytest.approx(paired.pvalue, rel=1e-8)
    # On 1 degree of freedom the t interval spans more than a difference can: none is given.
    assert rate["ci"] == {
        "not_reported": "2 scenarios are too few to say anything about scenarios like these"
    }
    assert across["like_these"]["too_few_scenarios"] is True
    family = result["multiplicity_across_scenarios"]
    assert (family["correction"], family["tests"]) == ("holm", 4)
    raw = [
        these["cmh_p"],
        these["van_elteren_p"],
        rate["p"],
        across["like_these"]["composite"]["p"],
    ]
    assert these["cmh_p_adjusted"] == pytest.approx(multipletests(raw, method="holm")[1][0])

    gate = run_cli("compare", a, b, "--fail-on-regression", env=fleet_env)
    assert gate.returncode == 1
    for fmt in ("markdown", "github"):
        text = run_cli("compare", a, b, "--format", fmt, env=fleet_env).stdout
        text = " ".join(text.split())
        assert f"B ({b}) against A ({a}) on these scenarios, and on scenarios like these" in text
        assert "worse (CMH and van Elteren on these 2 scenarios)" in text, fmt
        assert (
            "T1: worse on these 2 scenarios; not shown to carry over to others (on scenarios "
            "like these): 2 scenarios are too few to say anything about scenarios like "
            "these" in text
        ), fmt
    github = run_cli("compare", a, b, "--format", "github", env=fleet_env).stdout
    assert github.splitlines()[0] == (
        f"**❌ Regression: T1 significantly worse in {b} than in {a}** "
        "(CMH and van Elteren on these 2 scenarios; Holm-corrected across the 4 "
        "across-scenario tests, alpha 0.05)"
    )


def _implied_icc(cells: dict[tuple[str, str], Cell], tier: str) -> float:
    return implied_icc([[float(x) for x in c.passed] for (t, _), c in cells.items() if t == tier])


def test_compare_plans_at_the_correlation_the_two_experiments_showed(
    experiments: dict[str, str], fleet_env: dict[str, str]
) -> None:
    """As a report plans at its tier's and baseline's implied correlation, compare plans
    at B's tier's and A's: G scenarios x B's runs per scenario, at the level one of the
    family's four tests must reach alone."""
    a, b = experiments["two_before"], experiments["two_after"]
    shown = run_cli("compare", a, b, "--format", "json", env=fleet_env)
    assert shown.returncode == 0, shown.stderr
    plan = json.loads(shown.stdout)["across_scenarios"]["T1"]["planning"]
    assert plan is not None
    icc = (_implied_icc(TWO_AFTER, "T1") + _implied_icc(TWO_BEFORE, "T1")) / 2
    assert icc == pytest.approx(7 / 12)  # B's scenarios all or nothing (1), A's 1/6
    g, m, level = 2, 10, 0.05 / 4
    assert (plan["scenarios"], plan["runs"]) == (g, m)
    assert plan["icc"] == pytest.approx(icc)
    assert plan["alpha"] == pytest.approx(level)
    z = stats.norm.ppf(1 - level / 2) + stats.norm.ppf(0.8)
    t = stats.t.ppf(1 - level / 2, g - 1) + stats.t.ppf(0.8, g - 1)
    assert plan["these_scenarios"] == pytest.approx(z * np.sqrt(0.5 * (1 - icc) / (g * m)))
    assert plan["like_these"] == pytest.approx(t * np.sqrt(0.5 * (1 + (m - 1) * icc) / (g * m)))
    assert plan["like_these_limit"] == pytest.approx(t * np.sqrt(0.5 * icc / g))
    for fmt in ("markdown", "table"):
        text = run_cli("compare", a, b, "--format", fmt, env={**fleet_env, "COLUMNS": "250"}).stdout
        assert (
            "T1: planning, at the intra-scenario correlation observed (0.58), the smallest "
            "difference in pass rate 2 scenarios x 10 runs detect (80% power at 0.0125): on "
            f"these scenarios a difference of {plan['these_scenarios'] * 100:.0f} points or more"
            in " ".join(text.split())
        ), fmt


def test_a_significantly_worse_tier_is_a_regression_and_fails_the_gate(
    experiments: dict[str, str], fleet_env: dict[str, str]
) -> None:
    a, b = experiments["before"], experiments["broken"]
    shown = run_cli("compare", a, b, "--format", "json", env=fleet_env)
    assert shown.returncode == 0, shown.stderr  # without the flag, a report only
    result = json.loads(shown.stdout)
    assert result["reference"]["id"] == a and result["experiment"]["id"] == b
    assert result["regressions"] == ["T1"]
    t1 = result["tiers"]["T1"]
    assert (t1["reference_passes"], t1["passes"]) == (9, 1)
    assert t1["pass_rate_delta"] == pytest.approx(-0.8)
    assert t1["fisher_p"] == pytest.approx(stats.fisher_exact([[1, 9], [9, 1]]).pvalue)
    assert t1["verdict"] == "worse"
    assert result["tiers"]["T0"]["verdict"] == "no significant difference"
    assert result["scenarios"]["T1"]["s"]["verdict"] == "worse"
    assert "significantly worse" in shown.stderr and "T1" in shown.stderr

    gate = run_cli("compare", a, b, "--fail-on-regression", env=fleet_env)
    assert gate.returncode == 1
    assert "T1" in gate.stdout and "worse" in gate.stdout
    # The other way round T1 got better: the gate passes.
    improved = run_cli("compare", b, a, "--fail-on-regression", env=fleet_env)
    assert improved.returncode == 0, improved.stderr
    assert "better" in improved.stdout


def test_the_same_outcomes_pass_the_gate(
    experiments: dict[str, str], fleet_env: dict[str, str]
) -> None:
    result = run_cli(
        "compare",
        experiments["before"],
        experiments["same"],
        "--fail-on-regression",
        "--format",
        "markdown",
        env=fleet_env,
    )
    assert result.returncode == 0, result.stderr
    wilson = stats.binomtest(9, 10).proportion_ci(method="wilson")
    nine = f"0.900 [{wilson.low:.3f}, {wilson.high:.3f}]"
    assert f"| T1 | (all) | 10/10 | {nine} | {nine} | +0.000 | 1.000 | 1.000 |" in result.stdout
    assert "regressions (tiers significantly worse in B): none" in result.stdout


def test_alpha_and_the_correction_decide_what_counts_as_significant(
    experiments: dict[str, str], fleet_env: dict[str, str]
) -> None:
    a, b = experiments["before"], experiments["slipped"]
    loose = run_cli(
        "compare",
        a,
        b,
        "--fail-on-regression",
        "--correction",
        "none",
        "--format",
        "csv",
        env=fleet_env,
    )
    assert loose.returncode == 1
    rows = {(r["tier"], r["scenario"]): r for r in csv.DictReader(io.StringIO(loose.stdout))}
    # Fisher's test on passes alone misses it; Mann-Whitney on composites finds it. Raw
    # numbers, as `report --format csv` writes them, not the table's rounded text.
    t1 = rows["T1", "(all)"]
    assert float(t1["fisher_p"]) == pytest.approx(stats.fisher_exact([[5, 5], [9, 1]])[1])
    assert float(t1["mann_whitney_p"]) < 0.05 and t1["verdict"] == "worse"
    assert (t1["passes"], t1["reference_passes"]) == ("5", "9")
    low, high = float(t1["pass_rate_delta_ci_low"]), float(t1["pass_rate_delta_ci_high"])
    assert float(t1["pass_rate_delta"]) == pytest.approx(-0.4)
    assert low < -0.4 < high
    strict = run_cli(
        "compare",
        a,
        b,
        "--fail-on-regression",
        "--correction",
        "none",
        "--alpha",
        "0.01",
        env=fleet_env,
    )
    assert strict.returncode == 0, strict.stdout


@pytest.mark.parametrize(("correction", "method"), [("holm", "holm"), ("bh", "fdr_bh")])
def test_corrected_verdicts_gate_the_regression(
    experiments: dict[str, str], fleet_env: dict[str, str], correction: str, method: str
) -> None:
    """The slip that is significant alone is one of four tests (T0 and T1, Fisher and
    Mann-Whitney; the lone scenario's rows are its tier's tests): corrected, it is not."""
    a, b = experiments["before"], experiments["slipped"]
    args = ["compare", a, b, "--fail-on-regression", "--correction", correction]
    held = run_cli(*args, "--format", "json", env=fleet_env)
    assert held.returncode == 0, held.stderr
    result = json.loads(held.stdout)
    t0, t1 = result["tiers"]["T0"], result["tiers"]["T1"]
    raw = [t0["fisher_p"], t0["mann_whitney_p"], t1["fisher_p"], t1["mann_whitney_p"]]
    adjusted = [
        t0["fisher_p_adjusted"],
        t0["mann_whitney_p_adjusted"],
        t1["fisher_p_adjusted"],
        t1["mann_whitney_p_adjusted"],
    ]
    assert adjusted == pytest.approx(list(multipletests(raw, method=method)[1]))
    assert t1["mann_whitney_p"] < 0.05 <= t1["mann_whitney_p_adjusted"]
    assert t1["verdict"] == "no significant difference" and result["regressions"] == []
    assert result["multiplicity"] == {
        "correction": correction,
        "alpha": 0.05,
        "tests": 4,
        "lone_test_alpha": 0.0125,
    }
    assert result["scenarios"]["T1"]["s"] == t1
    # Effect sizes: the risk difference's Newcombe interval, Cliff's delta from U.
    newcombe = confint_proportions_2indep(5, 10, 9, 10, method="newcomb", compare="diff")
    assert t1["risk_difference_ci"]["low"] == pytest.approx(newcombe[0])
    assert t1["risk_difference_ci"]["high"] == pytest.approx(newcombe[1])
    assert t1["cliffs_delta"] == pytest.approx(2 * t1["prob_superior"] - 1)
    assert t1["cliffs_delta_ci"]["low"] < t1["cliffs_delta"] < t1["cliffs_delta_ci"]["high"]
    # What "no significant difference" rules out, at the level a lone test must reach.
    detect = t1["detectable"]
    assert detect["alpha"] == 0.0125 and detect["power"] == 0.8
    assert detect["improvement"] is None  # from 0.9, no rise within [0, 1] is detectable
    assert 0 < detect["regression"] < 0.9

    shown = run_cli(*args, "--format", "markdown", env=fleet_env)
    assert shown.returncode == 0
    t1_row = next(line for line in shown.stdout.splitlines() if line.startswith("| T1 | (all)"))
    cells = [c.strip() for c in t1_row.strip("|").split("|")]
    assert cells[6:9] == [
        f"{t1['fisher_p']:.3f}",
        f"{t1['fisher_p_adjusted']:.3f}",
        f"[{newcombe[0]:+.3f}, {newcombe[1]:+.3f}]",
    ]
    assert cells[-1] == (
        f"no significant difference (could detect a fall of "
        f"{detect['regression'] * 100:.0f} points or more in pass rate; not a rise)"
    )
    name = "Holm" if correction == "holm" else "Benjamini-Hochberg"
    assert f"p adj.: {name}-corrected across the 4 run-level tests" in shown.stdout


def test_a_report_json_with_its_runs_is_a_baseline_as_good_as_its_experiment(
    experiments: dict[str, str], fleet_env: dict[str, str], tmp_path: Path
) -> None:
    """A baseline kept as a CI artifact (`report --format json --runs`) compares as the
    experiment it came from; without its runs, or not a report, it is refused."""
    a, b = experiments["before"], experiments["broken"]
    saved = tmp_path / "baseline.json"
    written = run_cli("report", a, "--format", "json", "--runs", env=fleet_env)
    saved.write_text(written.stdout)
    from_file = run_cli("compare", str(saved), b, "--format", "json", env=fleet_env)
    from_store = run_cli("compare", a, b, "--format", "json", env=fleet_env)
    assert from_file.returncode == 0, from_file.stderr
    assert json.loads(from_file.stdout) == json.loads(from_store.stdout)
    gate = run_cli("compare", str(saved), b, "--fail-on-regression", env=fleet_env)
    assert gate.returncode == 1 and "significantly worse" in gate.stderr

    without_runs = tmp_path / "no-runs.json"
    without_runs.write_text(run_cli("report", a, "--format", "json", env=fleet_env).stdout)
    refused = run_cli("compare", str(without_runs), b, env=fleet_env)
    assert refused.returncode == 2
    assert f"{without_runs}: a report without its runs: write it with `scheduler report {a} " in (
        refused.stderr
    )
    other = tmp_path / "other.json"
    other.write_text('{"name": "not a report"}')
    wrong = run_cli("compare", str(other), b, env=fleet_env)
    assert wrong.returncode == 2 and f"{other}: not a report JSON" in wrong.stderr


def test_a_scenario_only_one_experiment_ran_is_left_out_of_its_tiers_row_and_said(
    experiments: dict[str, str], fleet_env: dict[str, str]
) -> None:
    """B ran s1 as A did, 6 of 10, and a new scenario s3 that every run fails: T1 did not
    change where both ran it; its 6 of 20 is not a loss against A's 6 of 10."""
    a, b = experiments["s1_only"], experiments["s1_and_new"]
    shown = run_cli("compare", a, b, "--format", "json", env=fleet_env)
    assert shown.returncode == 0, shown.stderr
    result = json.loads(shown.stdout)
    t1 = result["tiers"]["T1"]
    assert (t1["reference_passes"], t1["reference_runs"]) == (6, 10)
    assert (t1["passes"], t1["runs"]) == (6, 10)
    assert t1["pass_rate_delta"] == 0.0
    assert list(result["scenarios"]["T1"]) == ["s1"]
    assert result["unmatched_scenarios"] == {b: ["s3"]}
    note = "scenarios in only one experiment, left out of every row (a tier's included): B only: s3"
    for fmt in ("table", "markdown", "github"):
        assert note in run_cli("compare", a, b, "--format", fmt, env=fleet_env).stdout, fmt
    apart = run_cli("compare", a, experiments["s9_only"], env=fleet_env)
    assert apart.returncode == 2, apart.stderr
    assert (
        f"{a} and {experiments['s9_only']} share no scenario ({a} ran s1; "
        f"{experiments['s9_only']} ran s9); nothing to compare"
    ) in " ".join(apart.stderr.split())


def test_bad_comparisons_are_clear_errors(
    experiments: dict[str, str], fleet_env: dict[str, str]
) -> None:
    unrelated = run_cli("compare", experiments["before"], experiments["other"], env=fleet_env)
    assert unrelated.returncode == 2 and "share no tier" in unrelated.stderr
    missing = run_cli("compare", experiments["before"], "nope", env=fleet_env)
    assert missing.returncode == 2 and "no experiment 'nope'" in missing.stderr
    assert "did you mean" not in missing.stderr  # nothing in the store is near
    typo = experiments["before"][:-1] + "#"
    misspelt = run_cli("compare", typo, experiments["same"], env=fleet_env)
    assert misspelt.returncode == 2
    assert f"no experiment {typo!r} in this store; did you mean `" in misspelt.stderr
    # Among the suggestions, not necessarily first: an id made in the same second that
    # shares all but its last character is as near (b1b0 and b1b7 for b1b#, a found case).
    suggested = misspelt.stderr.split("did you mean", 1)[1]
    assert f"`{experiments['before']}`" in suggested
    bad_alpha = run_cli(
        "compare", experiments["before"], experiments["same"], "--alpha", "1.5", env=fleet_env
    )
    assert bad_alpha.returncode == 2 and "--alpha" in bad_alpha.stderr
