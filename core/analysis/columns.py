"""Runs as a report reads them: every field it needs of a run, read once.

A parsed RunResult is some 7 KB of objects spread over the heap (its fields'
dict, its nested models, each value an object of its own), so a pass over
100,000 of them misses the CPU's caches about once a run, whatever the pass
reads. A report made a pass per figure, per group of runs and per filter: about
120 passes for 100,000 runs, most of its time. A Group reads each run once, in
one C call (operator.attrgetter) for all the fields; each figure is then a
column of those small rows, made together and so close together in memory.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from functools import cached_property
from operator import attrgetter, itemgetter
from typing import Any

from core.metrics.catalog import INTERACTION_METRICS, RUN_METRICS, Metric
from core.results.run import RunResult, RunStatus

# What a report reads of a run besides its metrics' fields; the first four order the runs.
_OWN = (
    "tier",
    "scenario",
    "run_index",
    "run_id",
    "status",
    "isolation",
    "passed",
    "fail_reason",
    "judge",
    "rewards",
    "interaction.exit_codes_approximate",
    "process",
    "llm_calls",
    "model",
    "cost_unknown_reason",
    "outage",
    "outages",
)
_FIELDS = tuple(
    dict.fromkeys([*_OWN, *(f for m in (*RUN_METRICS, *INTERACTION_METRICS) for f in m.fields)])
)
_INDEX = {field: i for i, field in enumerate(_FIELDS)}
_READ = attrgetter(*_FIELDS)
_ORDER = itemgetter(0, 1, 2, 3)
_STATUS = _INDEX["status"]
_COUNTED = frozenset(status for status in RunStatus if status.counted)


class Group:
    """Runs (an experiment's, a tier's, a tier x scenario's) in (tier, scenario,
    run_index, run_id) order, a row of the fields' values each; `column(field)` holds
    the i-th run's value at index i."""

    def __init__(self, rows: list[tuple[Any, ...]] | None = None, *, all_counted: bool = False):
        self._rows = rows or []
        self._columns: dict[str, tuple[Any, ...]] = {}
        self._all_counted = all_counted

    @classmethod
    def of(cls, runs: Iterable[RunResult]) -> Group:
        rows = list(map(_READ, runs))
        rows.sort(key=_ORDER)
        return cls(rows)

    def __len__(self) -> int:
        return len(self._rows)

    def column(self, field: str) -> tuple[Any, ...]:
        if field not in self._columns:
            self._columns[field] = tuple(map(itemgetter(_INDEX[field]), self._rows))
        return self._columns[field]

    def values(self, metric: Metric) -> list[float]:
        """The metric's values, of the runs that have it."""
        columns = [self.column(field) for field in metric.fields]
        read = columns[0] if metric.compute is None else map(metric.compute, *columns)
        return [value for value in read if value is not None]

    def split(self, field: str) -> dict[Any, Group]:
        """The runs by their value of `field`, in the order each value first comes."""
        parts: dict[Any, list[tuple[Any, ...]]] = defaultdict(list)
        index = _INDEX[field]
        for row in self._rows:
            parts[row[index]].append(row)
        return {value: Group(rows) for value, rows in parts.items()}

    @cached_property
    def counted(self) -> Group:
        """The runs in the statistics (RunStatus.counted)."""
        if self._all_counted:
            return self
        return Group([row for row in self._rows if row[_STATUS] in _COUNTED], all_counted=True)
