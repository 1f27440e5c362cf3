"""core.store.ledger: reservations against the ceilings, the first refusal stopping
the ledger, settlements teaching the projection of their cell."""

from __future__ import annotations

import pytest

from core.matrix import Budget
from core.store import Store
from tests.support.records import matrix_of, record_experiment, result_of


def test_runs_reserve_until_one_does_not_fit_and_then_none_does(store: Store) -> None:
    budget = {"agent_usd": 1.0, "prior_usd": 0.4}
    info, specs = record_experiment(store, budget=budget)
    matrix = matrix_of(budget=budget)
    assert store.ledger.reserve(specs[0], matrix).agent_usd == pytest.approx(0.4)
    assert store.ledger.reserve(specs[0], matrix).fits  # its own again: nothing twice
    assert store.ledger.reserve(specs[1], matrix).fits
    refused = store.ledger.reserve(specs[2], matrix)
    assert not refused.fits and refused.refused is not None
    assert refused.refused.startswith("agent budget: $0.0000 spent + $0.8000 reserved")
    store.ledger.settle(result_of(specs[0], cost_usd=0.1))  # room again, but stopped
    assert store.ledger.reserve(specs[3], matrix).refused == refused.refused
    state = store.ledger.state(info.id)
    assert state.spent["agent"] == pytest.approx(0.1)
    assert state.reserved["agent"] == pytest.approx(0.4)
    assert state.limits == {"agent": 1.0} and state.stopped == refused.refused


def test_raised_limits_start_a_stopped_ledger_again(store: Store) -> None:
    budget = {"agent_usd": 0.5, "prior_usd": 0.4}
    info, specs = record_experiment(store, budget=budget)
    matrix = matrix_of(budget=budget)
    store.ledger.reserve(specs[0], matrix)
    assert not store.ledger.reserve(specs[1], matrix).fits
    store.ledger.set_limits(info.id, Budget(agent_usd=5.0))
    assert store.ledger.reserve(specs[1], matrix).fits
    assert store.ledger.state(info.id).stopped is None


def test_a_settled_run_projects_the_next_of_its_cell(store: Store) -> None:
    budget = {"agent_usd": 10.0, "judge_usd": 10.0}
    _, specs = record_experiment(store, budget=budget)
    matrix = matrix_of(budget=budget)
    store.ledger.reserve(specs[0], matrix)
    assert store.ledger.settle(result_of(specs[0], cost_usd=0.3, judge_cost_usd=0.02))
    assert not store.ledger.settle(result_of(specs[0], cost_usd=0.3))  # once per run
    same_cell = store.ledger.reserve(specs[1], matrix)
    assert (same_cell.agent_usd, same_cell.judge_usd) == pytest.approx((0.3, 0.02))
    other_cell = store.ledger.reserve(specs[2], matrix)  # no prior: the most a run cost
    assert other_cell.agent_usd == pytest.approx(0.3)
