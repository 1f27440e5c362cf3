"""Adaptive experiments simulated with the stopping rule itself (core.analysis.sequential),
for the rule's own tests and for the fleet tests that check where real runs stopped."""

from __future__ import annotations

import random

from core.analysis.sequential import CellRuns, next_wave
from core.matrix import AdaptiveRuns


def simulate(
    rule: AdaptiveRuns, rates: dict[str, float], rng: random.Random
) -> dict[str, tuple[int, str]]:
    """One adaptive experiment of one scenario, tier "B" the baseline, each tier's runs
    passing with its rate: the runs each cell got and why it stopped. Waves as the
    workers' sweep sends them (fleet.waves)."""
    cells = {(tier, "s"): CellRuns(0, 0, 0) for tier in rates}
    closed: dict[tuple[str, str], str] = {}
    wave = {cell: rule.min for cell in cells}
    while wave:
        for (tier, scenario), more in wave.items():
            had = cells[tier, scenario]
            passes = sum(rng.random() < rates[tier] for _ in range(more))
            cells[tier, scenario] = CellRuns(
                had.sent + more, had.counted + more, had.passes + passes
            )
        step = next_wave(rule, "B", cells, set(closed))
        closed.update(step.closing)
        wave = step.runs
    return {tier: (cells[tier, "s"].sent, closed[tier, "s"]) for tier in rates}


def deterministic(rule: AdaptiveRuns, outcomes: dict[str, bool]) -> dict[str, tuple[int, str]]:
    """The same, with every run of a tier passing or failing as scripted."""
    return simulate(
        rule, {t: 1.0 if passes else 0.0 for t, passes in outcomes.items()}, random.Random(0)
    )
