"""An until-idle worker's last sweep before it leaves (worker.idle): whether it stays.

The queue lengths are this test's to say (a worker's own read of Redis is covered end
to end in tests/integration/test_fleet_workers.py); the decision is the code's."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis
from celery.worker import state

from worker.idle import IdleWatch


class _Watch(IdleWatch):
    def __init__(self, sweep: Callable[[], list[str]], queued: list[int | None]):
        super().__init__(app=None, queues=["q"], idle_s=1, sweep=sweep)
        self.lengths = queued

    def _queued(self) -> int | None:
        return self.lengths.pop(0)


def _raises(exc: Exception) -> Callable[[], list[str]]:
    def sweep() -> list[str]:
        raise exc

    return sweep


@pytest.mark.parametrize(
    ("sweep", "queued", "leaves"),
    [
        (lambda: [], [0], True),
        # A run sent again may be on its way to this worker: in no queue, not yet taken.
        (lambda: ["exp:T0:s0:0"], [0], False),
        (lambda: [], [1], False),  # one came meanwhile
        # A full Redis refuses the sweep's writes; its queues, read, still say idle.
        (_raises(redis.OutOfMemoryError("OOM command not allowed")), [0], True),
        (_raises(redis.ConnectionError("refused")), [None], False),  # away: not idle
        (_raises(RuntimeError("a bug")), [0], True),  # logged; the worker's sweeps go on
    ],
    ids=["nothing-lost", "sent-again", "queued-meanwhile", "broker-full", "broker-away", "bug"],
)
def test_a_worker_leaves_only_if_its_last_sweep_sent_nothing_and_it_is_still_idle(
    sweep: Callable[[], list[str]], queued: list[int | None], leaves: bool
) -> None:
    watch = _Watch(sweep, queued)
    assert watch._swept_quiet(started=state.all_total_count[0]) is leaves
