"""Over random small designs (tiers x scenarios x runs, random outcomes), every interval a
report or a comparison carries lies in the range its figure can take, in JSON and as
printed; with fewer than three scenarios, no interval across scenarios is printed at all."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from core.analysis.aggregate import ReportSettings, aggregate
from core.analysis.comparison import compare_experiments
from core.matrix import Scoring
from core.results.report import ExperimentInfo, NoInterval
from core.results.run import RunResult
from core.stats.clustered import MIN_SCENARIOS_FOR_INTERVAL
from scheduler.report.render import render, render_comparison
from tests.support.experiments import make_run
from tests.support.intervals import impossible_in_json, impossible_printed

# One cell: its runs, each passed or not with an implementation rate.
_CELL = st.lists(st.tuples(st.booleans(), st.sampled_from([0.0, 0.3, 1.0])), min_size=1, max_size=4)


@st.composite
def _designs(draw: st.DrawFn) -> tuple[ExperimentInfo, list[RunResult]]:
    tiers = [f"T{i}" for i in range(draw(st.integers(2, 3)))]
    scenarios = [f"s{i}" for i in range(draw(st.integers(1, 4)))]
    runs = [
        make_run(tier, scenario, i, passed=passed, impl=impl)
        for tier in tiers
        for scenario in scenarios
        for i, (passed, impl) in enumerate(draw(_CELL))
    ]
    return ExperimentInfo(id="e", name="n", created_at=0.0, tiers=tiers, scenarios=scenarios), runs


@settings(max_examples=40, deadline=None)
@given(design=_designs(), other=_designs())
def test_every_interval_lies_in_its_range(
    design: tuple[ExperimentInfo, list[RunResult]], other: tuple[ExperimentInfo, list[RunResult]]
) -> None:
    info, runs = design
    report = aggregate(info, runs, ReportSettings(baseline="T0", scoring=Scoring()))
    assert impossible_in_json(json.loads(render(report, "json"))) == []
    for fmt in ("table", "markdown", "github", "csv"):
        assert impossible_printed(render(report, fmt, width=250)) == [], fmt
    compared = compare_experiments(other[0], other[1], info, runs)
    assert impossible_in_json(json.loads(render_comparison(compared, "json"))) == []
    for fmt in ("table", "markdown", "github"):
        assert impossible_printed(render_comparison(compared, fmt, width=250)) == [], fmt
    # Too few scenarios for an interval across them: the reason stands in its place.
    for tier in report.tiers.values():
        a = tier.analysis
        for clustered in (a.pass_rate_clustered, a.composite_mean_clustered):
            if clustered is not None and clustered.scenarios < MIN_SCENARIOS_FOR_INTERVAL:
                assert isinstance(clustered.ci, NoInterval)
        if (c := a.across_scenarios) is not None and c.like_these.scenarios < 3:
            assert isinstance(c.like_these.pass_rate.ci, NoInterval)
            assert isinstance(c.like_these.composite.ci, NoInterval)
