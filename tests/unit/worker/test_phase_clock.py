"""A delivery's seconds per phase, for its evidence."""

from __future__ import annotations

import time

from worker.phase_clock import PhaseClock


def test_each_phase_lasts_until_the_next_and_each_is_passed_on() -> None:
    seen: list[str] = []
    clock = PhaseClock(seen.append)
    assert clock.seconds() == {}  # a delivery that ended before its first phase
    clock("setup")
    time.sleep(0.05)
    clock("agent")
    time.sleep(0.1)
    spent = clock.seconds()
    assert seen == ["setup", "agent"]
    assert list(spent) == ["setup", "agent"]
    assert 0.05 <= spent["setup"] < 0.1 <= spent["agent"] < 0.5
