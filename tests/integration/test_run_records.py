"""worker.run_records against a real Redis: what a run keeps when its experiment is gone."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from core.matrix import load_matrix
from core.results.run import RunResult, RunSpec, RunStatus
from core.store import Store
from core.store.attempts import Delivery
from tests.support.experiments import command_matrix
from worker.run_records import encode, keep_evidence, whole_evidence

pytestmark = pytest.mark.integration


def test_evidence_of_a_run_whose_experiment_was_deleted_is_one_line_not_a_traceback(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`scheduler delete --force` landing between a run's result and the evidence kept
    after it (its minimal evidence, its whole being over the cap): the evidence finds
    no experiment to join and is dropped, said in one line (a traceback in the
    worker's log read as a bug)."""
    matrix = load_matrix(command_matrix(tmp_path, "true"))
    spec = RunSpec(experiment_id="deleted-exp", run_id="deleted-exp:T0:s:0", tier="T0",
                   scenario="s", run_index=0)  # fmt: skip
    result = RunResult.of(spec, RunStatus.completed)
    whole = whole_evidence(matrix, result, None, Delivery(), time.time(), {}, [])
    with caplog.at_level(logging.WARNING, logger="worker.run_records"):
        keep_evidence(store, matrix, whole, encode(whole), "over")
    (record,) = caplog.records
    assert record.getMessage() == (
        "run deleted-exp:T0:s:0: evidence not stored: its experiment was deleted"
    )
    assert record.exc_info is None
    assert list(store.redis.scan_iter(match="*deleted-exp*")) == []
