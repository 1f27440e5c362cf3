"""`scheduler compare A B`, end to end: finished experiments in Redis, the CLI, exit codes."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from scipy import stats

from core.store import Store
from tests.conftest import PREFIX, run_cli
from tests.experiments import Cell, seed_experiment

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
    }


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
    assert f"| T1 | (all) | 10/10 | {nine} | {nine} | +0.000 | 1.000 |" in result.stdout
    assert "regressions (tiers significantly worse in B): none" in result.stdout


def test_alpha_decides_what_counts_as_significant(
    experiments: dict[str, str], fleet_env: dict[str, str]
) -> None:
    a, b = experiments["before"], experiments["slipped"]
    loose = run_cli("compare", a, b, "--fail-on-regression", "--format", "csv", env=fleet_env)
    assert loose.returncode == 1
    rows = {(r["tier"], r["scenario"]): r for r in csv.DictReader(io.StringIO(loose.stdout))}
    # Fisher's test on passes alone misses it; Mann-Whitney on composites finds it.
    assert rows["T1", "(all)"]["Fisher p"] == "0.141"
    assert rows["T1", "(all)"]["verdict"] == "worse"
    strict = run_cli("compare", a, b, "--fail-on-regression", "--alpha", "0.01", env=fleet_env)
    assert strict.returncode == 0, strict.stdout


def test_bad_comparisons_are_clear_errors(
    experiments: dict[str, str], fleet_env: dict[str, str]
) -> None:
    unrelated = run_cli("compare", experiments["before"], experiments["other"], env=fleet_env)
    assert unrelated.returncode == 2 and "share no tier" in unrelated.stderr
    missing = run_cli("compare", experiments["before"], "nope", env=fleet_env)
    assert missing.returncode == 2 and "no experiment 'nope'" in missing.stderr
    bad_alpha = run_cli(
        "compare", experiments["before"], experiments["same"], "--alpha", "1.5", env=fleet_env
    )
    assert bad_alpha.returncode == 2 and "--alpha" in bad_alpha.stderr
