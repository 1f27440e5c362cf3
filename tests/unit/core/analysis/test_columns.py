"""core.analysis.columns: runs read once into rows, each figure a column of them."""

from __future__ import annotations

import math
import random

from core.analysis.columns import Group
from core.metrics.catalog import RUN_METRICS
from core.results.run import RunStatus
from tests.support.experiments import make_run

COST_OF_PASS = next(m for m in RUN_METRICS if m.name == "cost_of_pass_per_run")


def test_rows_come_in_tier_scenario_index_order_whatever_the_runs_order() -> None:
    runs = [make_run(t, s, i) for t in ("T1", "T0") for s in ("b", "a") for i in (10, 2)]
    group = Group.of(random.Random(1).sample(runs, len(runs)))
    keys = zip(*(group.column(f) for f in ("tier", "scenario", "run_index")), strict=True)
    assert list(keys) == [(t, s, i) for t in ("T0", "T1") for s in ("a", "b") for i in (2, 10)]
    by_tier = group.split("tier")
    assert list(by_tier) == ["T0", "T1"]
    assert list(by_tier["T1"].split("scenario")["b"].column("run_index")) == [2, 10]


def test_counted_leaves_out_what_the_statistics_leave_out() -> None:
    statuses = list(RunStatus)
    group = Group.of(make_run(index=i, status=s) for i, s in enumerate(statuses))
    counted = group.counted
    assert set(counted.column("status")) == {s for s in statuses if s.counted}
    assert counted.counted is counted
    assert len(group) == len(statuses)


def test_a_computed_metric_is_read_from_its_fields_and_skips_runs_without_them() -> None:
    runs = [
        make_run(index=0, passed=True, cost=0.5),
        make_run(index=1, passed=False, cost=0.25),
        make_run(index=2, passed=True, cost=None),
    ]
    assert Group.of(runs).values(COST_OF_PASS) == [0.5, math.inf]
    assert Group().values(COST_OF_PASS) == []
