"""The adaptive stopping rule (core.analysis.sequential) by simulation: valid under continuous
monitoring (its false-decision rate under no difference stays within alpha), quick to stop
a tier far better than the baseline, and running an identical tier to its max."""

from __future__ import annotations

import math
import random

import pytest

from core.analysis.sequential import CellRuns, interval, next_wave
from core.matrix import AdaptiveRuns, StopWhen
from tests.support.sequential import deterministic, simulate

ALPHA = 0.05
DECIDED = AdaptiveRuns(min=5, max=40, until=StopWhen(decided=True), alpha=ALPHA)
EXPERIMENTS = 1000


def test_an_all_pass_interval_matches_its_closed_form() -> None:
    # S = n: M_n(p) = 1 / ((n + 1) p^n), below 1/alpha for p > (alpha / (n + 1))^(1/n).
    for n in (1, 5, 20):
        low, high = interval(n, n, ALPHA)
        assert high == 1.0
        assert low == pytest.approx((ALPHA / (n + 1)) ** (1 / n), abs=1e-9)
    assert interval(0, 0, ALPHA) == (0.0, 1.0)
    low, high = interval(7, 20, ALPHA)
    assert low < 7 / 20 < high


def test_the_false_decision_rate_under_no_difference_is_within_alpha() -> None:
    rng = random.Random(20261122)
    false = 0
    for _ in range(EXPERIMENTS):
        outcome = simulate(DECIDED, {"B": 0.5, "T": 0.5}, rng)
        false += outcome["T"][1].startswith("decided")
    error = 3 * math.sqrt(ALPHA * (1 - ALPHA) / EXPERIMENTS)
    assert false / EXPERIMENTS <= ALPHA + error


def test_a_naive_p_value_rule_looked_at_every_wave_would_not_be() -> None:
    """What the always-valid procedure guards against: the two-proportion z-test at 0.05
    looked at after every run decides a difference where there is none far more often."""
    rng = random.Random(7)
    false = 0
    for _ in range(300):
        passes = {"B": 0, "T": 0}
        for n in range(1, 41):
            for tier in passes:
                passes[tier] += rng.random() < 0.5
            pooled = (passes["B"] + passes["T"]) / (2 * n)
            spread = math.sqrt(2 * pooled * (1 - pooled) / n)
            if spread and abs(passes["T"] - passes["B"]) / n / spread > 1.96:
                false += 1
                break
    assert false / 300 > ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / 300)


def test_a_far_better_tier_stops_early_and_an_identical_one_runs_to_max() -> None:
    rng = random.Random(1)
    stops = [simulate(DECIDED, {"B": 0.1, "better": 0.95, "same": 0.1}, rng) for _ in range(200)]
    better = sorted(s["better"][0] for s in stops)
    assert better[len(better) // 2] <= 20  # the median stop: half the max or sooner
    assert all(
        s["better"][1] == "decided: better than the baseline" or s["better"][0] == 40 for s in stops
    )
    same = [s["same"] for s in stops]
    assert sum(runs == 40 for runs, _ in same) / len(same) >= 0.95
    # The baseline runs as long as a tier is compared with it.
    assert all(s["B"][0] == max(s["same"][0], s["better"][0]) for s in stops)


def test_scripted_outcomes_stop_where_the_procedure_says() -> None:
    """All passes against all failures: decided after the wave at which the two
    intervals at alpha/2 first part, n = 9 runs (so at 10 with waves of 5)."""
    stops = deterministic(DECIDED, {"B": False, "better": True, "same": False})
    assert stops["better"] == (10, "decided: better than the baseline")
    assert stops["same"] == (40, "reached max (40 runs)")
    assert stops["B"] == (40, "reached max (40 runs)")
    width = AdaptiveRuns(min=5, max=40, until=StopWhen(width=0.3), alpha=ALPHA)
    narrow = deterministic(width, {"B": True})
    low, high = interval(narrow["B"][0], narrow["B"][0], ALPHA)
    assert high - low < 0.3
    before = narrow["B"][0] - 5
    low, high = interval(before, before, ALPHA)
    assert high - low >= 0.3


def test_a_wave_goes_to_the_least_settled_cells_first() -> None:
    """With a budget, what is sent first is what runs: the widest interval leads."""
    rule = AdaptiveRuns(min=4, max=12, until=StopWhen(width=0.1))
    cells = {
        ("B", "clear"): CellRuns(8, 8, 8),  # all passed: a narrow interval
        ("B", "mixed"): CellRuns(8, 8, 4),  # half passed: the widest
        ("B", "short"): CellRuns(10, 10, 10),  # near its max: 2 more at most
    }
    wave = next_wave(rule, "B", cells, closed=set())
    assert list(wave.runs) == [("B", "mixed"), ("B", "clear"), ("B", "short")]
    assert wave.runs == {("B", "mixed"): 4, ("B", "clear"): 4, ("B", "short"): 2}
    assert wave.closing == {}
    assert next_wave(rule, "B", cells, closed={("B", "mixed")}).runs.keys() == {
        ("B", "clear"),
        ("B", "short"),
    }
