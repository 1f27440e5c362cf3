"""Records as a submit and the workers write them, for the store's unit tests: a small
matrix, an experiment recorded with its run specs, a run's result."""

from __future__ import annotations

import time
import uuid
from typing import Any

from core.matrix import Matrix
from core.results.report import ExperimentInfo, ExperimentStatus
from core.results.run import RunResult, RunSpec, RunStatus, cell_specs
from core.store import Store


def matrix_of(**extra: Any) -> Matrix:
    """Two tiers and one scenario of two runs each, with `extra` keys of matrix.yaml."""
    return Matrix.model_validate(
        {
            "name": "unit",
            "agent": {"command": "true"},
            "runs_per_tier": 2,
            "tiers": [{"id": "T0"}, {"id": "T1"}],
            "scenarios": [{"id": "s1", "prompt": "go"}],
            **extra,
        },
        context={"check_files": False},
    )


def record_experiment(
    store: Store, exp_id: str | None = None, created_at: float | None = None, **matrix: Any
) -> tuple[ExperimentInfo, list[RunSpec]]:
    """An experiment of matrix_of(**matrix) recorded as a submit records it: its info,
    matrix and run specs (T0 and T1 x s1 x runs 0 and 1)."""
    exp_id = exp_id or f"exp-{uuid.uuid4().hex[:8]}"
    made = matrix_of(**matrix)
    specs = [
        spec
        for tier in made.tiers
        for scenario in made.scenarios
        for spec in cell_specs(exp_id, tier.id, scenario.id, range(2), None)
    ]
    info = ExperimentInfo(
        id=exp_id,
        name=made.name,
        status=ExperimentStatus.running,
        total_runs=len(specs),
        created_at=created_at if created_at is not None else time.time(),
        tiers=[t.id for t in made.tiers],
        scenarios=[s.id for s in made.scenarios],
    )
    store.experiments.create(info, made, specs)
    return info, specs


def result_of(spec: RunSpec, status: RunStatus = RunStatus.completed, **extra: Any) -> RunResult:
    """The run's result as a worker stores it."""
    return RunResult.of(spec, status, **extra)
