"""The tests of a report as one family (core.analysis.comparison.correct_report): what the
correction promises, checked by simulation, and which tests make up the family."""

from __future__ import annotations

import math
import random

import pytest

from core.analysis.aggregate import ReportSettings, aggregate
from core.analysis.columns import Group
from core.analysis.comparison import Row, compare, correct_report, correct_rows
from core.matrix import Scoring
from core.results.report import Comparison, ExperimentInfo, ExperimentReport, Verdict
from core.results.run import RunResult
from tests.support.experiments import make_run
from tests.support.oracles import multipletests

TIERS = ("T0", "T1", "T2", "T3")
SCENARIOS = ("s1", "s2", "s3")
RUNS = 10
REPORTS = 400
ALPHA = 0.05


def _cell(rng: random.Random, tier: str, scenario: str) -> list[RunResult]:
    """Runs of one tier x scenario; every tier has the same chances (no real difference)."""
    runs = []
    for i in range(RUNS):
        passed = rng.random() < 0.5
        impl = round(rng.uniform(0.5, 1.0) if passed else rng.uniform(0.0, 0.6), 2)
        runs.append(make_run(tier, scenario, i, passed=passed, impl=impl))
    return runs


def _null_family(rng: random.Random) -> dict[Row, Comparison]:
    cells = {(t, s): _cell(rng, t, s) for t in TIERS for s in SCENARIOS}
    rows: dict[Row, Comparison] = {}
    for tier in TIERS[1:]:
        mine = [r for s in SCENARIOS for r in cells[tier, s]]
        base = [r for s in SCENARIOS for r in cells[TIERS[0], s]]
        rows[tier, None] = compare(Group.of(mine), Group.of(base), TIERS[0])
        for s in SCENARIOS:
            rows[tier, s] = compare(
                Group.of(cells[tier, s]), Group.of(cells[TIERS[0], s]), TIERS[0]
            )
    return rows


def test_under_no_difference_a_corrected_report_rarely_calls_anything_significant() -> None:
    """24 tests a report (3 tiers x (1 + 3 scenarios) x 2 tests), all of them null: Holm
    keeps the chance of any significant verdict at alpha, BH too (all nulls: its FDR is
    the FWER); uncorrected, a report finds something most of the time."""
    rng = random.Random(15)
    any_significant = {"holm": 0, "bh": 0, "none": 0}
    for _ in range(REPORTS):
        family = _null_family(rng)
        for correction in any_significant:
            done, multiplicity = correct_rows(family, correction, ALPHA)  # type: ignore[arg-type]
            assert multiplicity.tests == 24
            if any(c.verdict is not Verdict.no_difference for c in done.values()):
                any_significant[correction] += 1
    error = 3 * math.sqrt(ALPHA * (1 - ALPHA) / REPORTS)  # three standard errors
    assert any_significant["holm"] / REPORTS <= ALPHA + error
    assert any_significant["bh"] / REPORTS <= ALPHA + error
    assert any_significant["none"] / REPORTS > 3 * ALPHA


def _report(runs: list[RunResult], scenarios: list[str]) -> ExperimentReport:
    info = ExperimentInfo(
        id="e", name="n", created_at=0.0, tiers=["T0", "T1", "T2"], scenarios=scenarios
    )
    return aggregate(info, runs, ReportSettings(baseline="T0", scoring=Scoring()))


def test_a_lone_scenario_is_its_tiers_test_and_counts_once() -> None:
    runs = [
        make_run(t, "s1", i, passed=i < p, impl=0.1 * (i % 7))
        for t, p in (("T0", 2), ("T1", 9), ("T2", 4))
        for i in range(RUNS)
    ]
    report = _report(runs, ["s1"])
    assert report.multiplicity is not None
    assert report.multiplicity.tests == 4  # T1 and T2, two tests each
    for tier in ("T1", "T2"):
        t = report.tiers[tier]
        assert t.scenarios["s1"].analysis.vs_baseline == t.analysis.vs_baseline
    # With two scenarios, every row is its own test: 2 tiers x 3 rows x 2.
    two = _report([*runs, *(r.model_copy(update={"scenario": "s2"}) for r in runs)], ["s1", "s2"])
    assert two.multiplicity is not None and two.multiplicity.tests == 12
    raw = [
        p
        for t in ("T1", "T2")
        for row in [two.tiers[t], *two.tiers[t].scenarios.values()]
        for p in (row.analysis.vs_baseline.fisher_p, row.analysis.vs_baseline.mann_whitney_p)  # type: ignore[union-attr]
    ]
    adjusted = [
        p
        for t in ("T1", "T2")
        for row in [two.tiers[t], *two.tiers[t].scenarios.values()]
        for p in (
            row.analysis.vs_baseline.fisher_p_adjusted,  # type: ignore[union-attr]
            row.analysis.vs_baseline.mann_whitney_p_adjusted,  # type: ignore[union-attr]
        )
    ]
    assert adjusted == pytest.approx(list(multipletests(raw, method="holm")[1]))


def test_correcting_a_stored_report_again_gives_the_same_report() -> None:
    runs = [
        make_run(t, s, i, passed=i < p)
        for t, p in (("T0", 3), ("T1", 8), ("T2", 5))
        for s in ("s1", "s2")
        for i in range(RUNS)
    ]
    report = _report(runs, ["s1", "s2"])
    assert correct_report(report, "holm", 0.05) == report
    bh = correct_report(report, "bh", 0.05)
    assert bh.multiplicity is not None and bh.multiplicity.correction == "bh"
    # Raw p-values never change; the adjusted ones and the verdicts follow the correction.
    t1, t1_bh = report.tiers["T1"].analysis.vs_baseline, bh.tiers["T1"].analysis.vs_baseline
    assert t1 is not None and t1_bh is not None
    assert (t1.fisher_p, t1.mann_whitney_p) == (t1_bh.fisher_p, t1_bh.mann_whitney_p)
    assert t1_bh.fisher_p_adjusted is not None and t1.fisher_p_adjusted is not None
    assert t1_bh.fisher_p_adjusted <= t1.fisher_p_adjusted
    assert correct_report(bh, "holm", 0.05) == report


def test_a_handful_of_runs_can_detect_nothing() -> None:
    """3 of 3 against 0 of 3: Fisher's p is 0.1, so no rise is detectable at 0.05 whatever
    the normal approximation says; with 10 a side the approximation's figure stands."""
    few = compare(
        Group.of(make_run("T1", "s", i, passed=True) for i in range(3)),
        Group.of(make_run("T0", "s", i, passed=False) for i in range(3)),
        "T0",
    )
    assert few.fisher_p == pytest.approx(0.1)
    assert few.detectable is not None
    assert (few.detectable.improvement, few.detectable.regression) == (None, None)
    ten = compare(
        Group.of(make_run("T1", "s", i, passed=i < 5) for i in range(10)),
        Group.of(make_run("T0", "s", i, passed=i < 5) for i in range(10)),
        "T0",
    )
    assert ten.detectable is not None
    assert ten.detectable.improvement == pytest.approx(ten.detectable.regression)
    assert 0.4 < ten.detectable.improvement < 0.5  # type: ignore[operator]
