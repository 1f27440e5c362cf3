"""An adaptive experiment's waves (`runs_per_tier: {min, max, until}`): the next one is sent
when the last has finished.

The first wave (every cell's `min` runs) goes out with the submit, as one chord. After
that, a sweep (fleet.recovery: the follower every second, every worker every
EVALFLEET_SWEEP_S) that finds every run sent so far with a result asks the stopping
rule (core.analysis.sequential) which cells have their answer; those close, and the
experiment's total drops by the runs they will never have. The other cells get their
next runs, least settled (widest interval) first, so that with a budget the runs
that still fit go where the answer is least known. Claiming the wave is one Lua step
(only one sweeper sends it); the runs are sent as plain run tasks, the chord-free
path lost runs take, and the experiment is aggregated by the sweep that finds every
run of the last wave done. A budget that stopped closes every open cell.
"""

from __future__ import annotations

import logging
from collections import Counter

from celery import Celery

from core.analysis.sequential import PROCEDURE, Cell, CellRuns, next_wave
from core.matrix import Matrix
from core.results.report import AdaptiveReport, CellStop
from core.results.run import RunResult, cell_specs
from core.store import Store
from fleet.sending import run_signature

log = logging.getLogger(__name__)

BUDGET_REACHED = "budget reached: no further runs"


def advance(app: Celery, store: Store, exp_id: str, matrix: Matrix, default_queue: str) -> int:
    """Send the next wave of an adaptive experiment when the last one has finished;
    returns how many runs were sent."""
    rule = matrix.adaptive
    if rule is None:
        return 0
    info = store.experiments.info(exp_id)
    if info.completed_runs >= info.total_runs:
        return 0  # every cell closed or at its max
    if info.completed_runs < store.specs.count(exp_id):
        return 0  # the wave is still running
    wave, closed = store.waves.state(exp_id)
    runs = store.results.all(exp_id)
    cells = _cells(matrix, runs)
    if matrix.budget is not None and store.ledger.state(exp_id).stopped:
        closing = {cell: BUDGET_REACHED for cell in cells if cell not in closed}
        sizes: dict[Cell, int] = {}
    else:
        plan = next_wave(rule, matrix.baseline_tier, cells, set(closed))
        closing, sizes = plan.closing, plan.runs
    fewer = sum(rule.max - cells[cell].sent for cell in closing)
    specs = [
        spec
        for (tier, scenario), size in sizes.items()
        for spec in cell_specs(
            exp_id,
            tier,
            scenario,
            range(cells[tier, scenario].sent, cells[tier, scenario].sent + size),
            matrix.queue_for(matrix.tier(tier), matrix.scenario(scenario)),
        )
    ]
    if store.waves.claim(exp_id, wave, fewer, closing, specs) != "claimed":
        return 0
    for spec in specs:
        # Where the first wave went, as a lost run is sent again (fleet.recovery).
        run_signature(app, matrix, spec).apply_async(queue=spec.queue or default_queue)
    log.info(
        "experiment %s: wave %d: %d runs to %d cells, %d cells closed",
        exp_id,
        wave + 1,
        len(specs),
        len(sizes),
        len(closing),
    )
    return len(specs)


def _cells(matrix: Matrix, runs: list[RunResult]) -> dict[Cell, CellRuns]:
    """Every adaptive cell (a scenario with `runs:` of its own is not) and its runs so far."""
    sent = Counter((r.tier, r.scenario) for r in runs)
    counted = Counter((r.tier, r.scenario) for r in runs if r.counted)
    passes = Counter((r.tier, r.scenario) for r in runs if r.counted and r.passed)
    return {
        (tier.id, scenario.id): CellRuns(
            sent[tier.id, scenario.id], counted[tier.id, scenario.id], passes[tier.id, scenario.id]
        )
        for tier in matrix.tiers
        for scenario in matrix.scenarios
        if scenario.runs is None
    }


def adaptive_report(
    store: Store, exp_id: str, matrix: Matrix, runs: list[RunResult]
) -> AdaptiveReport:
    """The procedure, and for each adaptive cell the runs it got and why it stopped (a
    cell the last wave took to its max is not closed by a wave after it)."""
    assert matrix.adaptive is not None
    _, closed = store.waves.state(exp_id)
    cells: dict[str, dict[str, CellStop]] = {}
    for (tier, scenario), cell in _cells(matrix, runs).items():
        why = closed.get((tier, scenario))
        if why is None:
            why = (
                f"reached max ({matrix.adaptive.max} runs)"
                if cell.sent >= matrix.adaptive.max
                else "running"
            )
        cells.setdefault(tier, {})[scenario] = CellStop(runs=cell.sent, reason=why)
    return AdaptiveReport(procedure=PROCEDURE, cells=cells)
