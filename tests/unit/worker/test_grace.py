"""Which pool processes a leaving worker tells (worker.grace.to_tell): those
running a run, never one running an aggregation, which would die and be redelivered."""

from __future__ import annotations

from dataclasses import dataclass

from fleet.sending import AGGREGATE_TASK, REJUDGE_TASK, RUN_TASK
from worker.grace import to_tell


@dataclass
class Request:  # what to_tell reads of Celery's worker Request
    name: str
    worker_pid: int | None


def test_only_pool_processes_running_a_run_are_told() -> None:
    requests = [Request(RUN_TASK, 11), Request(AGGREGATE_TASK, 12), Request(REJUDGE_TASK, 13)]
    assert to_tell(requests, [11, 12, 13, 14]) == {11}


def test_a_run_not_yet_started_tells_every_process_but_those_running_other_tasks() -> None:
    requests = [Request(RUN_TASK, None), Request(AGGREGATE_TASK, 12)]
    assert to_tell(requests, [11, 12, 13]) == {11, 13}


def test_an_aggregation_alone_is_left_to_finish() -> None:
    assert to_tell([Request(AGGREGATE_TASK, 12)], [11, 12]) == set()
    assert to_tell([], [11, 12]) == set()
