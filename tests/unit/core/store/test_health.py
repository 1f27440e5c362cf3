"""core.store.health: fail-fast stops a tier once, when its first results are all the
same infrastructure error; a result of the agent's own keeps it going. A result is
counted in the step that stores it (core.store.results, `finish`)."""

from __future__ import annotations

from core.results.run import RunSpec, RunStatus
from core.store import Store
from core.store.health import HealthNote
from tests.support.records import record_experiment, result_of


def note(store: Store, spec: RunSpec, infra_error: str | None, threshold: int) -> bool:
    """Store a result of `spec` with its fail-fast note: True when it stopped its tier."""
    status = RunStatus.infra_error if infra_error else RunStatus.completed
    result = result_of(spec, status, fail_reason=infra_error)
    finished = store.results.finish(result, health=HealthNote(spec.tier, infra_error, threshold))
    assert finished.saved
    return finished.stopped


def another(spec: RunSpec, index: int) -> RunSpec:
    return spec.model_copy(update={"run_index": index, "run_id": f"{spec.run_id}-{index}"})


def test_a_tier_is_stopped_once_at_the_threshold(store: Store) -> None:
    info, specs = record_experiment(store)
    assert not note(store, specs[0], "no such image", 2)
    assert note(store, specs[1], "no such image", 2)
    assert not note(store, another(specs[1], 2), "no such image", 2)
    assert store.health.halted(info.id) == {"T0": "no such image"}


def test_a_result_of_its_own_or_a_zero_threshold_keeps_the_tier_going(store: Store) -> None:
    info, specs = record_experiment(store)
    note(store, specs[0], None, 1)
    assert not note(store, specs[1], "boom", 1)
    assert not note(store, specs[2], "boom", 0)  # T1
    assert store.health.halted(info.id) == {}


def test_another_infrastructure_error_keeps_the_tier_going(store: Store) -> None:
    # One scenario's setup fails, another's agent cannot start: the tier's runs are
    # not all broken one way, and a stopped tier would record each of its runs with
    # the first error, whatever its own scenario's was.
    info, specs = record_experiment(store)
    assert not note(store, specs[0], "setup command 'make deps' failed", 2)
    assert not note(store, another(specs[0], 3), "agent could not start (exit 127)", 2)
    assert not note(store, another(specs[0], 4), "setup command 'make deps' failed", 2)
    assert not note(store, another(specs[0], 5), "setup command 'make deps' failed", 2)
    assert store.health.halted(info.id) == {}


def test_a_result_stored_already_is_not_counted_again(store: Store) -> None:
    info, specs = record_experiment(store)
    assert not note(store, specs[0], "boom", 2)
    # another delivery's: its own timings
    again = result_of(specs[0], RunStatus.infra_error, fail_reason="boom", duration_seconds=2.0)
    assert not store.results.finish(again, health=HealthNote("T0", "boom", 2)).saved
    assert store.health.halted(info.id) == {}


def test_the_first_unrecognised_format_of_a_tier_is_kept(store: Store) -> None:
    info, _ = record_experiment(store)
    store.health.note_unrecognised(info.id, "T0", "claude-stream-json")
    store.health.note_unrecognised(info.id, "T0", "plain")
    assert store.health.unrecognised(info.id) == {"T0": "claude-stream-json"}
