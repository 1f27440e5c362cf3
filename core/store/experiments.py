"""The experiments: the ``experiments`` zset (ids by created time) and each one's
``exp:{id}`` record hash (info, matrix, status, counts, the files' manifest).

The record's counts are written by the scripts that store results (Results.save,
Attempts, Waves), so `info` is always live; `status` changes are announced on the
experiment's status channel in the same step as they are written.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from redis.client import PubSub

from core.errors import ExperimentLost, ExperimentNotFound, LostInRestart, ResumeInProgress
from core.results.report import ExperimentInfo, ExperimentStatus, submitted_at
from core.results.run import RunSpec
from core.store import scripts
from core.store.client import SCAN_COUNT, TextClient, Value
from core.store.keys import Keys
from core.store.ledger import Ledger
from core.store.server import restart_that_lost
from core.store.specs import Specs

# The matrix's models are imported where a stored matrix is read back: reading an
# experiment's status or report needs none of them.
if TYPE_CHECKING:
    from core.files.bundle import Manifest
    from core.matrix import Matrix

# The longest a resume holds an experiment: working out what to send and sending
# it takes seconds, even for 100,000 runs.
RESUME_HOLD_S = 300


class Experiments:
    def __init__(self, client: TextClient, keys: Keys, ledger: Ledger, specs: Specs):
        self.redis = client
        self.keys = keys
        self._ledger = ledger
        self._specs = specs
        self._release_hold = client.register_script(scripts.RELEASE_HOLD)
        self._cancel = client.register_script(scripts.CANCEL)
        self._set_status = client.register_script(scripts.SET_STATUS)

    def create(
        self,
        info: ExperimentInfo,
        matrix: Matrix,
        specs: Sequence[RunSpec] = (),
        manifest: Manifest | None = None,
    ) -> None:
        """The experiment's record, its budget's limits and `specs`; a submit streams
        its specs in batches instead (Specs.add). `manifest`: its files, saved before
        (Bundles.save)."""
        key = self.keys.experiment(info.id)
        record: dict[str, Value] = {
            "info": info.model_dump_json(),
            "matrix": matrix.model_dump_json(),
            "status": info.status.value,
            "total": info.total_runs,
            "done": 0,
            "passes": 0,
            "errors": 0,
        }
        if manifest is not None:
            record["files"] = manifest.model_dump_json()
        pipe = self.redis.pipeline()
        pipe.hset(key, mapping=record)
        pipe.zadd(self.keys.experiments(), {info.id: info.created_at})
        pipe.execute()
        if matrix.budget is not None:
            self._ledger.set_limits(info.id, matrix.budget)
        self._specs.add(info.id, specs)

    def why_missing(self, exp_id: str) -> ExperimentNotFound:
        """Why the experiment has no record: lost with some keys left, lost whole in a
        restart after it was submitted, or never here."""
        record, others = self.keys.of_experiment(exp_id)
        if self.redis.exists(record) or next(
            self.redis.scan_iter(match=others, count=SCAN_COUNT), None
        ):
            return ExperimentLost(exp_id)
        return self.lost_in_restart(exp_id) or ExperimentNotFound(exp_id)

    def lost_in_restart(self, exp_id: str) -> LostInRestart | None:
        """The experiment was submitted before the broker last started, keeping nothing
        on disk: the restart lost it (what its id says of when it was submitted)."""
        submitted = submitted_at(exp_id)
        restarted = None if submitted is None else restart_that_lost(self.redis, submitted)
        if submitted is None or restarted is None:
            return None
        return LostInRestart(exp_id, submitted, restarted)

    def exists(self, exp_id: str) -> bool:
        """Whether the experiment has its record (keys left without one do not count)."""
        return bool(self.redis.hexists(self.keys.experiment(exp_id), "info"))

    def require(self, exp_id: str) -> None:
        """ExperimentNotFound unless the experiment has its record (ExperimentLost when
        some of its keys are left)."""
        if not self.exists(exp_id):
            raise self.why_missing(exp_id)

    def info(self, exp_id: str) -> ExperimentInfo:
        """The experiment's info with live status and counts."""
        raw = self.redis.hgetall(self.keys.experiment(exp_id))
        if "info" not in raw:
            raise self.why_missing(exp_id) from None
        info = ExperimentInfo.model_validate_json(raw["info"])
        return info.model_copy(
            update={
                # An adaptive experiment's total drops as its cells close (Waves.claim).
                "total_runs": int(raw.get("total", info.total_runs)),
                "status": ExperimentStatus(raw["status"]),
                "completed_runs": int(raw.get("done", 0)),
                "passes": int(raw.get("passes", 0)),
                "errors": int(raw.get("errors", 0)),
                "cancelled": int(raw.get("cancelled", 0)),
                "not_run": int(raw.get("not_run", 0)),
                "finished_at": float(raw["finished_at"]) if raw.get("finished_at") else None,
            }
        )

    def matrix(self, exp_id: str, relocate: Callable[[Path], Path] | None = None) -> Matrix:
        """The submitted matrix; `relocate` maps each of its paths (the submitter's) to
        where this machine has the file (Manifest.relocation)."""
        raw = self.redis.hget(self.keys.experiment(exp_id), "matrix")
        if raw is None:
            raise self.why_missing(exp_id)
        from core.matrix import Matrix

        return Matrix.submitted(json.loads(raw), relocate)

    def set_status(
        self, exp_id: str, status: ExperimentStatus, finished_at: float | None = None
    ) -> None:
        """ExperimentNotFound once it has no record (deleted meanwhile)."""
        keys = [self.keys.experiment(exp_id), self.keys.status_channel(exp_id)]
        finished = "" if finished_at is None else repr(finished_at)
        if self._set_status(keys=keys, args=[status.value, finished]) == "gone":
            raise ExperimentNotFound(exp_id)

    def cancel(self, exp_id: str) -> ExperimentStatus:
        """Mark a pending or running experiment cancelled, in one step with reading its
        status (scripts.CANCEL); returns its status before. A finished one (complete
        or cancelled) is left as it is: its report stands. ExperimentNotFound when it
        has no record."""
        cancelled = ExperimentStatus.cancelled.value
        keys = [self.keys.experiment(exp_id), self.keys.status_channel(exp_id)]
        before = self._cancel(keys=keys, args=[cancelled])
        if not before:
            raise ExperimentNotFound(exp_id)
        return ExperimentStatus(before)

    def interrupt(self, exp_id: str) -> ExperimentStatus:
        """Mark a pending or running experiment interrupted (its runs wait for a resume),
        as `cancel` marks it cancelled, in one step; returns its status before."""
        keys = [self.keys.experiment(exp_id), self.keys.status_channel(exp_id)]
        before = self._cancel(keys=keys, args=[ExperimentStatus.interrupted.value])
        if not before:
            raise ExperimentNotFound(exp_id)
        return ExperimentStatus(before)

    def status_changes(self, exp_id: str) -> PubSub:
        """A subscription to the experiment's status changes (set_status), whose
        get_message(timeout=...) waits for the next one."""
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(self.keys.status_channel(exp_id))
        return pubsub

    @contextmanager
    def resuming(self, exp_id: str) -> Iterator[None]:
        """Hold the experiment's resume for the block: ResumeInProgress while another
        holds it (a killed resume's hold expires after RESUME_HOLD_S)."""
        key = self.keys.resuming(exp_id)
        since = time.strftime("%H:%M:%S UTC", time.gmtime())
        token = f"{socket.gethostname()} pid {os.getpid()}, since {since}\n{uuid.uuid4().hex}"
        if not self.redis.set(key, token, nx=True, ex=RESUME_HOLD_S):
            holder = (self.redis.get(key) or "it has just ended").split("\n")[0]
            raise ResumeInProgress(exp_id, holder)
        try:
            yield
        finally:
            self._release_hold(keys=[key], args=[token])

    def reopen(self, exp_id: str) -> None:
        """Back to running for a resume; the next aggregation sets finished_at again and
        writes version 1's report anew. Until then it has none: a follower (the resume's,
        a cancel's) waits for that one, not for the report of the runs before. The later
        versions made so far (rejudges, rescores of those runs) are kept, superseded:
        `Reports.current` passes them over."""
        key = self.keys.experiment(exp_id)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(key, "status", ExperimentStatus.running.value)
        pipe.hdel(key, "finished_at", "sent")
        pipe.delete(self.keys.report(exp_id))
        pipe.hset(key, "superseded", self.redis.hget(key, "versions") or 0)
        pipe.execute()

    def mark_sent(self, exp_id: str, default_queue: str) -> None:
        """Every run of the experiment is on the broker, those without a queue of
        their own in `default_queue`: from now on, one that is nowhere was lost
        (the recovery sweep's unaccounted runs)."""
        self.redis.hset(self.keys.experiment(exp_id), "sent", default_queue)

    def sent_to(self, exp_id: str) -> str | None:
        """The default queue the experiment's runs were sent to; None while sending."""
        queue = self.redis.hget(self.keys.experiment(exp_id), "sent")
        return str(queue) if queue else None

    def note_chord(self, exp_id: str, group_id: str) -> None:
        """The experiment's runs go out in chord `group_id` (a submit, each resume):
        deleting the experiment removes that chord's Celery keys too."""
        key = self.keys.experiment(exp_id)
        chords = self.redis.hget(key, "chords") or ""
        self.redis.hset(key, "chords", f"{chords} {group_id}".strip())

    def all(self) -> list[ExperimentInfo]:
        """Every experiment, oldest first."""
        ids = self.redis.zrange(self.keys.experiments(), 0, -1)
        return [self.info(exp_id) for exp_id in ids if self.exists(exp_id)]

    def recent_ids(self, recent: int = 1000) -> list[str]:
        """The ids of the `recent` latest experiments, oldest first."""
        return list(self.redis.zrange(self.keys.experiments(), -recent, -1))

    def latest(self) -> str | None:
        ids = self.redis.zrange(self.keys.experiments(), -1, -1)
        return ids[0] if ids else None

    def active(self, recent: int = 1000) -> list[str]:
        """Experiments not yet aggregated (no finished_at) nor interrupted (nothing of
        theirs is sent again until a resume), among the `recent` latest."""
        ids = self.redis.zrange(self.keys.experiments(), -recent, -1)
        pipe = self.redis.pipeline(transaction=False)  # a full Redis refuses every MULTI
        for exp_id in ids:
            pipe.hmget(self.keys.experiment(exp_id), "status", "finished_at")
        states = pipe.execute()
        paused = ExperimentStatus.interrupted.value
        return [
            i
            for i, (status, finished) in zip(ids, states, strict=True)
            if status and status != paused and not finished
        ]
