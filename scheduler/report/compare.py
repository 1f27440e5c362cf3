"""`scheduler compare`: one experiment (B) against another (A), tier by tier."""

from __future__ import annotations

from core.analysis.comparison import CONFIDENCE
from core.results.report import Comparison, ExperimentComparison
from scheduler.report.formatting import ALL, PASS_RATE, Table, num, pass_rate
from scheduler.report.verdicts import (
    TEST_COLUMNS,
    stratified_note,
    stratified_tiers,
    test_notes,
    unmatched_notes,
    versus,
)


def comparison_title(result: ExperimentComparison) -> str:
    return (
        f"{result.experiment.name} ({result.experiment.id}) against "
        f"{result.reference.name} ({result.reference.id})"
    )


def comparison(result: ExperimentComparison) -> Table:
    rows = []
    for tier_id, c in result.tiers.items():
        rows.append([tier_id, ALL, *_compared(c)])
        for scenario, cell in result.scenarios.get(tier_id, {}).items():
            rows.append([tier_id, scenario, *_compared(cell)])
    notes = [
        f"B = {result.experiment.id}, A = {result.reference.id}; deltas are B - A; "
        f"pass rate = passes / runs counted, with its {CONFIDENCE:.0%} Wilson interval",
        *test_notes(
            result.multiplicity,
            result.multiplicity_across_scenarios,
            stratified_tiers(result.tiers),
        ),
        *stratified_note(result.tiers),
        "regressions (tiers significantly worse in B): "
        + (", ".join(result.regressions) or "none"),
    ]
    notes += unmatched_notes(result)
    return Table(
        "B against A, per tier and tier x scenario",
        [
            "tier",
            "scenario",
            "runs counted A/B",
            f"A {PASS_RATE}",
            f"B {PASS_RATE}",
            *TEST_COLUMNS[:4],
            "median composite A → B",
            *TEST_COLUMNS[4:],
        ],
        rows,
        notes,
        label_columns=2,
        narrow_drop=(
            "Cliff's δ composite [95% CI]",
            "Δ pass rate 95% CI",
            "median composite A → B",
            "Mann-Whitney p",
            "Fisher p",
        ),
    )


def _compared(c: Comparison) -> list[str]:
    tests = versus(c)
    return [
        f"{c.reference_runs}/{c.runs}",
        pass_rate(c.reference_passes, c.reference_runs),
        pass_rate(c.passes, c.runs),
        *tests[:4],  # the pass-rate test, then the composite's medians beside its test
        f"{num(c.reference_composite_median)} → {num(c.composite_median)}",
        *tests[4:],
    ]
