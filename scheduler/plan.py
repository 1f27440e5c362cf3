"""From a validated Matrix to the runs to send: the experiment's record and its runs' ids.

Their task options and time budgets are the fleet's (fleet.sending)."""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterator

from core.errors import PlanTooLarge
from core.matrix import Matrix
from core.results.report import ID_STAMP, ExperimentInfo, ExperimentStatus
from core.results.run import RunSpec, cell_specs
from core.settings import setting
from core.wording import plural

# The most runs one experiment may have. Submitting streams runs to the broker in
# bounded memory, but each queued run costs the broker about 2 KB until it runs.
ENV_MAX_RUNS = "EVALFLEET_MAX_RUNS"


def max_runs() -> int:
    return int(setting(ENV_MAX_RUNS))


def new_experiment_id(matrix: Matrix, now: float | None = None) -> str:
    stamp = time.strftime(ID_STAMP, time.gmtime(now if now is not None else time.time()))
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", matrix.name)[:40]
    return f"{name}-{stamp}-{secrets.token_hex(2)}"


def experiment_info(
    matrix: Matrix, experiment_id: str, total_runs: int, created_at: float | None = None
) -> ExperimentInfo:
    """The record of a newly submitted experiment."""
    return ExperimentInfo(
        id=experiment_id,
        name=matrix.name,
        status=ExperimentStatus.running,
        total_runs=total_runs,
        created_at=created_at if created_at is not None else time.time(),
        tiers=[t.id for t in matrix.tiers],
        scenarios=[s.id for s in matrix.scenarios],
        runs_per_tier=max(matrix.runs_for(s) for s in matrix.scenarios),
    )


def plan(matrix: Matrix, experiment_id: str) -> Iterator[RunSpec]:
    """Every run of the experiment's first wave (every run, unless it is adaptive), one
    at a time (100,000 runs never sit in memory at once), with ids that depend only on
    their coordinates.

    Interleaved: run 0 of every tier x scenario, then run 1 of each, and so on, the
    order workers take them in. Every tier makes progress from the start: a budget
    that runs out leaves each tier with runs to compare (not the first tiers with all
    of theirs and the last with none), a broken tier's first runs come early enough
    for fail-fast to stop it, and a report of a stopped experiment covers every tier."""
    cells = [
        (tier.id, scenario.id, matrix.queue_for(tier, scenario), matrix.first_wave(scenario))
        for tier in matrix.tiers
        for scenario in matrix.scenarios
    ]
    for index in range(max((runs for *_, runs in cells), default=0)):
        for tier, scenario, queue, runs in cells:
            if index < runs:
                yield from cell_specs(experiment_id, tier, scenario, (index,), queue)


def check_size(matrix: Matrix) -> None:
    """Refuse a plan above max_runs() (PlanTooLarge), before anything is stored or sent."""
    most = max_runs()
    if matrix.total_runs() > most:
        raise PlanTooLarge(
            f"{plural(len(matrix.tiers), 'tier')} x {plural(len(matrix.scenarios), 'scenario')} x "
            f"{describe_runs(matrix)} = {matrix.total_runs():,} runs, more than one "
            f"experiment may have ({most:,}, {ENV_MAX_RUNS}): lower runs_per_tier or "
            "split the matrix"
        )


# Scenarios with a run count of their own named one by one; past it, counted.
MAX_NAMED_COUNTS = 5


def describe_runs(matrix: Matrix) -> str:
    """The runs each tier gets of each scenario, in words: "10 runs",
    "5 to 40 runs (adaptive)", and the scenarios with a count of their own."""
    runs = matrix.runs_per_tier
    if isinstance(runs, int):
        text = plural(runs, "run")
    else:
        text = f"{runs.min} to {runs.max} runs (adaptive, waves of {runs.step})"
    own = [f"{s.id}: {s.runs}" for s in matrix.scenarios if s.runs is not None]
    if len(own) > MAX_NAMED_COUNTS:  # a dataset's tasks: by count, not one by one
        counts: dict[int, int] = {}
        for scenario in matrix.scenarios:
            if scenario.runs is not None:
                counts[scenario.runs] = counts.get(scenario.runs, 0) + 1
        own = [f"{n} scenarios: {runs}" for runs, n in counts.items()]
    return text + (f" ({', '.join(own)} runs)" if own else "")
