"""scheduler.experiments: an experiment's status in one line."""

from __future__ import annotations

import time

from core.matrix import Matrix
from core.results.report import ExperimentInfo, ExperimentStatus, submitted_at
from scheduler.experiments import status_line, until_reported
from scheduler.plan import new_experiment_id

CREATED = time.mktime((2026, 11, 22, 10, 15, 0, 0, 0, -1))


def info(**fields: object) -> ExperimentInfo:
    return ExperimentInfo.model_validate(
        {"id": "exp", "name": "n", "total_runs": 10, "created_at": CREATED, **fields}
    )


def test_status_line_counts_the_runs_that_ran_apart_from_cancelled_and_not_run() -> None:
    line = status_line(
        info(status=ExperimentStatus.cancelled, completed_runs=9, cancelled=3, not_run=2, passes=1)
    )
    assert line == (
        "exp  cancelled 4/10 runs ran  1 passed  0 infrastructure errors  3 cancelled  "
        "2 not run (budget)  2026-11-22 10:15"
    )


def test_a_complete_experiment_with_errors_says_so_in_its_state() -> None:
    line = status_line(info(status=ExperimentStatus.complete, completed_runs=10, errors=2))
    assert line.startswith("exp  complete with 2 infrastructure errors 10/10 runs ran")
    assert status_line(info(status=ExperimentStatus.running)).startswith("exp  running   0/10")


def test_an_experiments_id_tells_when_it_was_submitted_to_the_second() -> None:
    """All a broker that lost an experiment whole leaves to tell it was there before."""
    named = Matrix.model_construct(name="my-eval")  # type: ignore[call-arg]  # its name alone
    exp_id = new_experiment_id(named, now=1_795_600_000.75)
    assert exp_id.startswith("my-eval-20261125-")
    assert submitted_at(exp_id) == 1_795_600_000.0
    assert submitted_at("hand-named") is None
    assert submitted_at("x-20261125-999999-ab12") is None  # not a time of day


def test_an_experiment_without_a_report_says_what_brings_it() -> None:
    paused = until_reported(info(status=ExperimentStatus.interrupted))
    assert "`scheduler resume exp` runs them and prints the report" in paused
    assert "`scheduler cancel exp` records them cancelled and prints it" in paused
    cancelled = until_reported(info(status=ExperimentStatus.cancelled))
    assert "embedded `scheduler cancel exp` records them here" in cancelled
    assert "`scheduler report exp --wait` waits for a fleet's workers" in cancelled
    for under_way in (ExperimentStatus.pending, ExperimentStatus.running):
        said = until_reported(info(status=under_way))
        assert "`scheduler report exp --wait` follows them to it" in said
        assert "`scheduler status exp` shows how far they are" in said
    assert until_reported(info(status=ExperimentStatus.complete)) == ""
