"""Seconds a delivery spends in each phase (setup, agent, gates, judge), for the
run's evidence: a phase lasts until the next one begins or the clock is read."""

from __future__ import annotations

import time
from collections.abc import Callable

from core.timeline import mark


class PhaseClock:
    """Passes each phase on to `on_phase` (Flower's events) and notes when it began."""

    def __init__(self, on_phase: Callable[[str], None]):
        self.on_phase = on_phase
        self.marks: list[tuple[str, float]] = []

    def __call__(self, phase: str) -> None:
        self.marks.append((phase, time.monotonic()))
        mark(f"run: {phase}")
        self.on_phase(phase)

    def seconds(self) -> dict[str, float]:
        """Each phase's seconds so far (none before the first phase began)."""
        ends = [at for _, at in self.marks[1:]] + [time.monotonic()]
        spent: dict[str, float] = {}
        for (phase, began), ended in zip(self.marks, ends, strict=False):
            spent[phase] = round(spent.get(phase, 0.0) + ended - began, 3)
        return spent
