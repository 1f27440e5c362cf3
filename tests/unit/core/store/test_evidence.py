"""core.store.evidence: a run's evidence, compressed in Redis or as a file of an
artifacts folder, within the experiment's cap (past it, the minimal evidence)."""

from __future__ import annotations

import secrets
import zlib
from pathlib import Path

import pytest

from core.errors import ExperimentNotFound
from core.evidence.models import Excerpt, RunEvidence
from core.store import Store
from core.store.evidence import FILE_POINTER, EncodedEvidence, evidence_file
from core.store.results import Finished
from tests.support.records import record_experiment, result_of


def _evidence(exp_id: str, run_id: str, stdout: str = "out") -> RunEvidence:
    return RunEvidence(experiment_id=exp_id, run_id=run_id, stdout=Excerpt.whole(stdout))


def test_evidence_is_kept_whole_until_the_cap_then_minimal(store: Store) -> None:
    info, specs = record_experiment(store)
    whole = _evidence(info.id, specs[0].run_id)
    saved = store.evidence.save(whole, cap_bytes=10_000)
    assert saved.kept == "whole" and saved.bytes > 0
    big = _evidence(info.id, specs[1].run_id, secrets.token_hex(20_000))  # incompressible
    small = _evidence(info.id, specs[1].run_id, "cut")
    assert store.evidence.save(big, minimal=small, cap_bytes=10_000).kept == "minimal"
    assert store.evidence.get(info.id, specs[1].run_id) == small
    assert store.evidence.get(info.id, specs[0].run_id) == whole
    assert store.evidence.count(info.id) == 2
    counted = store.redis.hget(store.keys.experiment(info.id), "evidence_bytes")
    assert int(counted or 0) == saved.bytes + len(
        zlib.compress(small.model_dump_json().encode(), 6)
    )


def test_evidence_in_a_folder_is_read_through_its_pointer(store: Store, tmp_path: Path) -> None:
    info, specs = record_experiment(store)
    evidence = _evidence(info.id, specs[0].run_id)
    saved = store.evidence.save(evidence, folder=tmp_path)
    assert saved.path == evidence_file(tmp_path, info.id, specs[0].run_id) and saved.path.is_file()
    raw = store.binary.hget(store.keys.evidence(info.id), specs[0].run_id)
    assert raw == FILE_POINTER + str(saved.path).encode()
    assert store.evidence.get(info.id, specs[0].run_id) == evidence
    assert store.evidence.blobs(info.id) == {specs[0].run_id: saved.path.read_bytes()}
    assert store.evidence.files(info.id) == [saved.path]
    saved.path.unlink()
    with pytest.raises(OSError):
        store.evidence.get(info.id, specs[0].run_id)


def test_no_evidence_is_written_for_a_deleted_experiment(store: Store) -> None:
    info, specs = record_experiment(store)
    store.redis.delete(store.keys.experiment(info.id))
    with pytest.raises(ExperimentNotFound):
        store.evidence.save(_evidence(info.id, specs[0].run_id))
    assert store.evidence.count(info.id) == 0


def test_evidence_stored_with_its_result_is_kept_once_and_within_the_cap(store: Store) -> None:
    """The run's last step (Results.finish): its evidence goes in with its result, in
    one step. A late duplicate's evidence does not replace the first; evidence over
    the cap writes nothing (the caller then keeps the minimal evidence); a delivery
    whose lease another took over stores neither."""
    info, specs = record_experiment(store)
    first = _evidence(info.id, specs[0].run_id, "first")
    encoded = EncodedEvidence.of(first)
    done = store.results.finish(result_of(specs[0]), evidence=encoded, evidence_cap=10_000)
    assert done == Finished(saved=True, evidence="whole")
    late = EncodedEvidence.of(_evidence(info.id, specs[0].run_id, "late"))
    duplicate = result_of(specs[0], duration_seconds=2.0)  # another delivery's timings
    assert store.results.finish(duplicate, evidence=late) == Finished(saved=False)
    assert store.evidence.get(info.id, specs[0].run_id) == first

    big = EncodedEvidence.of(_evidence(info.id, specs[1].run_id, secrets.token_hex(20_000)))
    over = store.results.finish(result_of(specs[1]), evidence=big, evidence_cap=10_000)
    assert over == Finished(saved=True, evidence="over")
    assert store.evidence.get(info.id, specs[1].run_id) is None
    assert store.results.get(info.id, specs[1].run_id) is not None
    counted = store.redis.hget(store.keys.experiment(info.id), "evidence_bytes")
    assert int(counted or 0) == encoded.size

    store.leases.take(info.id, specs[2].run_id, "newer", 60)
    taken = store.results.finish(
        result_of(specs[2]), holder="older", evidence=EncodedEvidence.of(first)
    )
    assert taken == Finished(saved=False)
    assert store.evidence.get(info.id, specs[2].run_id) is None
    assert store.results.get(info.id, specs[2].run_id) is None


def test_a_save_tried_again_after_its_reply_was_lost_is_its_own(store: Store) -> None:
    """Redis ran a run's last step, then went away before the reply: the worker tries
    the same step again (worker.run, `patiently`) and learns its result is stored, as
    it is, counted once; another delivery's result is still 'already stored'."""
    info, specs = record_experiment(store)
    result = result_of(specs[0], passed=True)
    evidence = EncodedEvidence.of(_evidence(info.id, specs[0].run_id))
    assert store.results.finish(result, "d1", evidence=evidence).saved
    assert store.results.finish(result, "d1", evidence=evidence) == Finished(True, False, "whole")
    record = store.redis.hgetall(store.keys.experiment(info.id))
    assert record["done"] == "1" and record["passes"] == "1"
    other = result.model_copy(update={"duration_seconds": 9.0})
    assert store.results.finish(other, "d2") == Finished(saved=False)
