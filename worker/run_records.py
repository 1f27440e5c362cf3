"""A run's evidence (README, "Evidence"): redacted, cut to the matrix's caps
(core.evidence.caps), with every delivery of the run (the record begin_delivery
keeps, so one that died without a result shows too) and the seconds each phase
took. In Redis it is stored in the same step as the run's result
(core.store.results, `finish`); in the artifacts folder, when the matrix names one
and this worker can write there, once the result is stored: only the delivery
whose result counts writes the run's file.

Best effort: the result is stored, or is being stored, and the chord must fire, so
nothing here fails the run; what goes wrong is logged.
"""

from __future__ import annotations

import logging
import socket
import time

import redis

from core.errors import ExperimentNotFound
from core.evidence.caps import bounded, minimal
from core.evidence.models import Attempt, RunEvidence
from core.matrix import Matrix
from core.results.run import RunResult, RunSpec, outcome
from core.store import Store
from core.store.attempts import Delivery
from core.store.evidence import EncodedEvidence

log = logging.getLogger(__name__)


# wide: one caller, whose values these are: an object would be built for this call alone
def whole_evidence(
    matrix: Matrix,
    result: RunResult,
    evidence: RunEvidence | None,
    delivery: Delivery,
    started: float,
    phases: dict[str, float],
    secrets: list[str],
) -> RunEvidence | None:
    """The evidence to keep of the run: what its evaluation gathered (`evidence`, None
    when it never got to an agent), its deliveries and phases, redacted and bounded;
    None when that failed. `started`: when this delivery began, on this worker's clock."""
    whole = evidence or RunEvidence(experiment_id=result.experiment_id, run_id=result.run_id)
    try:
        whole = whole.model_copy(
            update={"phases": phases, "attempts": _attempts(delivery, result, started)}
        )
        return bounded(whole, matrix.evidence, secrets)
    except Exception as exc:
        log.warning("run %s: evidence not stored: %r", result.run_id, exc, exc_info=True)
        return None


# Evidence up to this size (a quick run's is about 1 KB) is stored in the step that
# stores the result. Larger evidence is stored after it, on its own: Redis counts a
# command's arguments toward maxmemory before it runs the command, so on a broker
# near its limit the evidence alone is refused, never the result with it.
WITH_RESULT_BYTES = 16 * 1024


def encode(whole: RunEvidence | None) -> EncodedEvidence | None:
    """The evidence as Redis keeps it, made once for whichever step stores it; None
    when there is none or encoding failed."""
    if whole is None:
        return None
    try:
        return EncodedEvidence.of(whole)
    except Exception as exc:
        log.warning("run %s: evidence not stored: %r", whole.run_id, exc, exc_info=True)
        return None


def stored_with_result(matrix: Matrix, encoded: EncodedEvidence | None) -> EncodedEvidence | None:
    """The evidence the result's step stores with it: all of it, unless the matrix
    keeps evidence in an artifacts folder or it is larger than WITH_RESULT_BYTES."""
    if encoded is None or matrix.artifacts is not None or encoded.size > WITH_RESULT_BYTES:
        return None
    return encoded


def evidence_cap(matrix: Matrix) -> int:
    """The bytes of evidence the experiment keeps whole, all runs together."""
    return int(matrix.evidence.max_experiment_mb * 1024 * 1024)


def keep_evidence(
    store: Store,
    matrix: Matrix,
    whole: RunEvidence | None,
    encoded: EncodedEvidence | None,
    kept: str | None,
) -> None:
    """Once the result's step stored the result and, as `kept` says, its evidence
    ('whole'), or none of it ('over' the cap), or none because it was not the step's
    to store (too large, or for an artifacts folder): what is still to store (the
    run's minimal evidence, or its evidence on its own, `encoded` as it was for the
    step)."""
    if whole is None or kept == "whole":
        return
    try:
        if kept == "over":
            store.evidence.save(_minimal(whole, matrix))
        else:
            _save(store, matrix, whole, encoded)
    except redis.OutOfMemoryError:  # the broker's state, not a bug: no traceback
        log.warning("run %s: evidence not stored: the broker is full", whole.run_id)
    except ExperimentNotFound:  # deleted while the run was under way: nothing to keep
        log.warning("run %s: evidence not stored: its experiment was deleted", whole.run_id)
    except Exception as exc:
        log.warning("run %s: evidence not stored: %r", whole.run_id, exc, exc_info=True)


def end_delivery(store: Store, result: RunResult, number: int, then: str) -> None:
    """Delivery `number` of the run ends without storing `result` (`then`: what follows)."""
    delivery_ended(store, result, number, f"{outcome(result)}; {then}")


def delivery_ended(store: Store, run: RunSpec | RunResult, number: int, ended: str) -> None:
    """Delivery `number` of `run` ended, as `ended` says, without a result."""
    try:
        store.attempts.end(run.experiment_id, run.run_id, number, ended)
    except redis.RedisError as exc:  # only the record of how the delivery ended
        log.warning("run %s: end of delivery %d not recorded: %s", run.run_id, number, exc)


def _attempts(delivery: Delivery, result: RunResult, started: float) -> list[Attempt]:
    """The run's deliveries, this one (the last) with its end and outcome."""
    this = delivery.deliveries[-1] if delivery.deliveries else None
    return [
        *delivery.deliveries[:-1],
        Attempt(
            worker=this.worker if this is not None else socket.gethostname(),
            started_at=this.started_at if this is not None else started,
            ended_at=time.time(),
            outcome=outcome(result),
        ),
    ]


def _minimal(whole: RunEvidence, matrix: Matrix) -> RunEvidence:
    mb = matrix.evidence.max_experiment_mb
    return minimal(
        whole,
        f"the experiment's evidence reached max_experiment_mb ({mb:g} MB): "
        "only this summary of the run was kept",
    )


def _save(
    store: Store, matrix: Matrix, whole: RunEvidence, encoded: EncodedEvidence | None
) -> None:
    """In the artifacts folder if the matrix names one, else (or not writable here) in
    Redis, within the cap."""
    summary = _minimal(whole, matrix)
    cap = evidence_cap(matrix)
    folder = matrix.artifacts.dir if matrix.artifacts is not None else None
    try:
        store.evidence.save(whole, encoded=encoded, minimal=summary, cap_bytes=cap, folder=folder)
    except OSError as exc:  # the artifacts folder is not there or not writable here
        log.warning("run %s: evidence kept in Redis: %s", whole.run_id, exc)
        note = f"artifacts folder not writable on this worker, kept in Redis instead: {exc}"
        kept = whole.model_copy(update={"cuts": [*whole.cuts, note]})
        store.evidence.save(kept, minimal=summary, cap_bytes=cap)
