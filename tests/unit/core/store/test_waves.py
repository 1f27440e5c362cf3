"""core.store.waves: an adaptive experiment's next wave is claimed by one sweeper, and
only once every run sent so far has its result."""

from __future__ import annotations

from core.results.run import cell_specs
from core.store import Store
from tests.support.records import record_experiment, result_of


def test_a_wave_is_claimed_once_after_every_run_has_a_result(store: Store) -> None:
    info, specs = record_experiment(store)
    assert store.waves.state(info.id) == (1, {})
    more = list(cell_specs(info.id, "T0", "s1", [2, 3], None))
    closing = {("T1", "s1"): "interval narrow enough"}
    assert store.waves.claim(info.id, 1, 2, closing, more) == "in flight"
    for spec in specs:
        store.results.save(result_of(spec))
    assert store.waves.claim(info.id, 1, 2, closing, more) == "claimed"
    assert store.waves.claim(info.id, 1, 2, closing, more) == "taken"
    assert store.waves.state(info.id) == (2, closing)
    assert store.specs.of(info.id, [s.run_id for s in more]) == more
    assert store.experiments.info(info.id).total_runs == 2
