"""What the store keeps per run, against the real Redis: compact (fields at their
defaults and ids the key already names are left out) and read back whole."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from core.matrix import Matrix
from core.results.report import ExperimentInfo, ExperimentStatus
from core.results.run import GateResult, RunResult, RunSpec, RunStatus
from core.store import Store

pytestmark = pytest.mark.integration  # the real Redis

MATRIX = Matrix.model_validate(
    {
        "name": "bytes",
        "agent": {"command": "true"},
        "tiers": [{"id": "T0"}],
        "scenarios": [{"id": "s", "prompt": "go"}],
    }
)


def _experiment(store: Store, runs: int) -> list[RunSpec]:
    exp_id = f"bytes-{uuid.uuid4().hex[:8]}"
    specs = [
        RunSpec(experiment_id=exp_id, run_id=f"{exp_id}:T0:s:{i}", tier="T0", scenario="s",
                run_index=i, queue="gpu" if i == 1 else None)
        for i in range(runs)
    ]  # fmt: skip
    info = ExperimentInfo(
        id=exp_id, name="bytes", status=ExperimentStatus.running, total_runs=runs,
        created_at=time.time(),
    )  # fmt: skip
    store.experiments.create(info, MATRIX, specs)
    return specs


def test_specs_are_stored_without_their_ids_and_read_back_whole(store: Store) -> None:
    specs = _experiment(store, 3)
    exp_id = specs[0].experiment_id

    raw = store.redis.hget(store.keys.specs(exp_id), specs[0].run_id)
    assert raw is not None and exp_id not in raw  # the key and the field say it already
    assert json.loads(raw) == {"tier": "T0", "scenario": "s", "run_index": 0}
    assert store.specs.all(exp_id) == specs  # the queue of run 1 included
    assert store.results.pending(exp_id) == specs


def test_a_result_is_stored_without_its_defaults_and_read_back_equal(store: Store) -> None:
    spec = _experiment(store, 1)[0]
    result = RunResult(
        experiment_id=spec.experiment_id, run_id=spec.run_id, tier="T0", scenario="s",
        run_index=0, status=RunStatus.completed, passed=True, pass_rate=1.0, impl_rate=1.0,
        composite_score=1.0, cost_usd=0.0, exit_code=0, duration_seconds=0.01,
        gates=[GateResult(gate_type="command_succeeds", passed=True, message="exit code 0")],
        gates_passed=1, gates_total=1, transcript_format="events-jsonl",
    )  # fmt: skip
    assert store.results.save(result)

    raw = store.redis.hget(store.keys.runs(spec.experiment_id), spec.run_id)
    assert raw is not None
    assert "fail_reason" not in raw and "llm_calls" not in raw  # defaults left out
    assert '"cost_usd":0.0' in raw  # a zero that is not the default (None: unknown) stays
    assert len(raw) < 800  # was 1.6 KB with every default written out
    assert store.results.get(spec.experiment_id, spec.run_id) == result
    assert store.results.all(spec.experiment_id) == [result]
    # A second delivery finds the stored result, whole.
    delivery = store.attempts.begin(spec, "late-holder", 60)
    assert delivery.stored == result
