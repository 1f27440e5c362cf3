"""Finishing what the fleet lost: lost runs sent again, finished experiments aggregated.

A sweep of one experiment (`recover`) does three things:

- A run whose lease expired without a result is lost: its worker died (SIGKILL,
  a torn-down CI runner, Redis restarted under it). The store hands each such
  run to one sweeper only, which sends it again as a plain run task, outside
  the chord. Idempotency (worker.run) makes a late original harmless.
- A run a worker took from the queue but never started (it died, or lost
  Redis, in between) has no lease to expire: its message waits in Redis's
  unacknowledged set for the visibility timeout, hours. Once it has waited
  longer than a lease, and its run has no lease and no result, the message is
  put back in its queue, as the visibility timeout would do.
- A run that is nowhere (no result, no live lease, no message in its queue or
  among the unacknowledged) was lost by the broker's client: kombu pops a
  message from the queue and then records it as unacknowledged, and Redis
  going away in between loses it. Once every sweep for a lease has found the
  run nowhere, one sweeper sends it again. Looking for it means reading the
  queues, so a sweep does that only when the experiment's missing runs
  outnumber everything that could hold them, and a sweeper reads them again
  only after SCAN_SPACING times the last read took: a run between a worker's
  fetch and its lease is missing from both at almost every sweep, and reading
  100,000 queued messages takes seconds.
- An adaptive experiment whose wave has finished gets its next wave
  (fleet.waves).
- An experiment whose every run has a result but which is not aggregated yet
  is aggregated here. Normally the chord body does that, but a chord waits for
  every header task, and the header task of a lost run comes back only after
  the broker's visibility timeout (answering with the stored result) or never.
  Aggregation is idempotent, so the chord firing later changes nothing.

Who sweeps: whoever follows an experiment (`scheduler submit`, `resume --wait`:
scheduler.follow, every second) and every worker, for all unfinished
experiments, every EVALFLEET_SWEEP_S seconds (default 10), in a thread of the
worker's main process (`recover_all`, from worker.sweeper's bootstep), and once
more before an until-idle worker leaves (worker.idle).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from celery import Celery
from pydantic import ValidationError

from core.errors import ExperimentNotFound
from core.matrix import Matrix
from core.results.report import ExperimentInfo
from core.results.run import RunSpec
from core.store import Store, keys
from fleet.app import BROKER_DOWN
from fleet.finish import finish_experiment
from fleet.sending import RUN_TASK, run_queues, run_signature
from fleet.waves import advance

log = logging.getLogger(__name__)

# Reading the queues for vanished runs takes at most 1/SCAN_SPACING of a sweeper's time.
SCAN_SPACING = 20.0
# When this process may read an experiment's queues again (time.monotonic()).
_next_scan: dict[str, float] = {}


def recover(app: Celery, store: Store, exp_id: str) -> list[str]:
    """One sweep of one experiment; returns the ids of the runs sent again."""
    # One read of what every step needs: the matrix is parsed and validated on each.
    matrix = store.experiments.matrix(exp_id)
    default_queue = store.experiments.sent_to(exp_id)  # None until every run was sent

    def send_again(specs: list[RunSpec], why: str) -> list[str]:
        return [s.run_id for s in specs if _send_again(app, store, matrix, s, default_queue, why)]

    resent = send_again(store.results.claim_lost(exp_id), "its lease expired")
    resent += _requeue_never_started(app, store, exp_id, matrix.lease_s)
    if default_queue is not None and matrix.adaptive is not None:
        advance(app, store, exp_id, matrix, default_queue)
    info = store.experiments.info(exp_id)
    # Looked for only once every run was sent, where the sender sent them (a
    # sweeping worker's own default queue may be another).
    if default_queue is not None:
        unaccounted = _unaccounted(app, store, info, run_queues(matrix, default_queue))
        if unaccounted is not None:  # None: not looked for this time, nothing learnt
            vanished = store.results.claim_unaccounted(exp_id, unaccounted, matrix.lease_s)
            resent += send_again(vanished, "its message vanished")
    if info.completed_runs >= info.total_runs:
        _next_scan.pop(exp_id, None)  # nothing left to look for: a worker sweeps for weeks
        if info.finished_at is None:
            finish_experiment(store, exp_id)
    return resent


def _send_again(
    app: Celery, store: Store, matrix: Matrix, spec: RunSpec, default_queue: str | None, why: str
) -> bool:
    try:
        # Back where it was sent first, not to this sweeper's own default queue.
        run_signature(app, matrix, spec).apply_async(queue=spec.queue or default_queue)
    except Exception as exc:  # the broker went away between the claim and the send
        log.warning("could not send lost run %s again (%s); next sweep retries", spec.run_id, exc)
        store.leases.mark_lost(spec.experiment_id, spec.run_id)
        return False
    log.warning("run %s was lost (%s): sent again", spec.run_id, why)
    return True


def _requeue_never_started(app: Celery, store: Store, exp_id: str, lease_s: float) -> list[str]:
    """Messages of this experiment's runs taken from the queue more than a lease ago
    by a worker that never started them: back to their queue. Such messages of runs
    that have a result, or whose lease lapsed (step 1 sent them again), are dropped."""
    with app.pool.acquire(block=True) as conn:  # a pooled connection: sweeps are frequent
        channel = conn.default_channel
        client = channel.client
        # kombu's Redis transport records when each message was handed out.
        tags = client.zrangebyscore(keys.UNACKED_INDEX, 0, time.time() - lease_s)
        if not tags:
            return []
        leases = store.leases.state(exp_id)
        requeued = []
        for tag, raw in zip(tags, client.hmget(keys.UNACKED, tags), strict=True):
            spec = _run_spec(keys.unacked_message(raw))
            if spec is None or spec.experiment_id != exp_id or spec.run_id in leases.live:
                continue
            if spec.run_id in leases.lapsed or store.results.get(exp_id, spec.run_id) is not None:
                _forget_unacked(client, tag)  # stale: it would hide a lost run from `_unaccounted`
            else:
                channel.qos.restore_by_tag(tag, client)  # a transaction: once, whoever races
                log.warning("run %s was taken but never started: back in its queue", spec.run_id)
                requeued.append(spec.run_id)
    return requeued


def _unaccounted(
    app: Celery, store: Store, info: ExperimentInfo, queues: set[str]
) -> set[str] | None:
    """Runs without a result, a live lease, or a message in `queues` or unacknowledged;
    None when the queues were read too recently to be read again."""
    missing = info.total_runs - info.completed_runs
    if not missing:
        return set()
    live = store.leases.live(info.id)
    with app.pool.acquire(block=True) as conn:
        # Reads only, and no MULTI: a full Redis refuses every transaction.
        pipe = conn.default_channel.client.pipeline(transaction=False)
        for queue in queues:
            pipe.llen(keys.queue_key(queue))
        # Not the unacknowledged messages: that hash is shared by every experiment on
        # the broker, and one stale entry of another would hide a lost run here forever.
        if missing <= len(live) + sum(pipe.execute()):
            return set()  # they may all be somewhere: not worth reading the queues
    began = time.monotonic()
    if began < _next_scan.get(info.id, 0.0):
        return None
    unaccounted = store.results.unfinished(info.id) - live - on_the_broker(app, info.id, queues)
    _next_scan[info.id] = time.monotonic() + SCAN_SPACING * (time.monotonic() - began)
    return unaccounted


def on_the_broker(app: Celery, exp_id: str, queues: set[str]) -> set[str]:
    """The experiment's runs with a message waiting in `queues` or taken by a worker
    and not yet acknowledged (kombu's Redis transport keeps those in a hash)."""
    with app.pool.acquire(block=True) as conn:
        channel = conn.default_channel
        pipe = channel.client.pipeline(transaction=False)
        for queue in queues:
            pipe.lrange(keys.queue_key(queue), 0, -1)
        pipe.hvals(keys.UNACKED)
        *queued, unacked = pipe.execute()
    messages = [keys.message(raw) for raws in queued for raw in raws]
    messages += [keys.unacked_message(raw) for raw in unacked]
    return {
        spec.run_id
        for spec in map(_run_spec, messages)
        if spec is not None and spec.experiment_id == exp_id
    }


@dataclass(frozen=True)
class Resendable:
    """What a resume finds of an experiment's runs without a result."""

    specs: list[RunSpec]  # neither running nor on their way: to send again
    queued: int  # with a message queued, or taken by a worker that has not begun it
    running: int  # with a live lease


def to_resend(app: Celery, store: Store, exp_id: str) -> Resendable:
    """What `scheduler resume` sends: runs without a result that are neither in
    progress (a live lease) nor on their way (a message queued, or taken and not
    yet acknowledged). Sending those too would run them twice at once. A message
    whose worker died is the sweep's to put back or drop (`recover`)."""
    matrix = store.experiments.matrix(exp_id)
    # Where they went; a submit stopped mid-send recorded nothing: where resume sends.
    queues = run_queues(matrix, store.experiments.sent_to(exp_id) or app.conf.task_default_queue)
    waiting = on_the_broker(app, exp_id, queues)
    unfinished = store.results.unfinished(exp_id)
    running = store.leases.live(exp_id) & unfinished
    return Resendable(
        specs=[spec for spec in store.results.pending(exp_id) if spec.run_id not in waiting],
        queued=len((waiting & unfinished) - running),
        running=len(running),
    )


def _run_spec(message: Any) -> RunSpec | None:
    """The RunSpec of an `evalfleet.run` message (JSON only), else None."""
    args = keys.task_args(message, RUN_TASK)
    try:
        return RunSpec.model_validate(args[0]) if args else None
    except ValidationError:
        return None


def recover_all(app: Celery, store: Store) -> list[str]:
    """One sweep of every active experiment; returns the ids of the runs sent again."""
    resent = []
    for exp_id in store.experiments.active():
        try:
            resent += recover(app, store, exp_id)
        except BROKER_DOWN:
            raise
        except Exception:  # one broken experiment must not stop the others' recovery
            log.exception("recovery of experiment %s failed", exp_id)
    _drop_stale_of_finished(app, store)
    return resent


def _drop_stale_of_finished(app: Celery, store: Store) -> None:
    """Unacknowledged messages of finished experiments' runs, taken more than a lease
    ago: every run of theirs has its result, so each is a dead worker's leftover.
    `recover` drops such messages only while their experiment is active; one that
    finished first (its lost runs sent again and done before a sweep came) kept them
    until the broker's visibility timeout handed them out again, hours later."""
    with app.pool.acquire(block=True) as conn:
        client = conn.default_channel.client
        taken = client.zrange(keys.UNACKED_INDEX, 0, -1, withscores=True)
        if not taken:
            return
        raws = client.hmget(keys.UNACKED, [tag for tag, _ in taken])
        leases: dict[str, float | None] = {}  # an experiment's lease, None unless finished
        now = time.time()
        for (tag, taken_at), raw in zip(taken, raws, strict=True):
            spec = _run_spec(keys.unacked_message(raw))
            if spec is None:
                continue
            exp_id = spec.experiment_id
            if exp_id not in leases:
                leases[exp_id] = _lease_if_finished(store, exp_id)
            lease_s = leases[exp_id]
            if lease_s is not None and taken_at < now - lease_s:
                _forget_unacked(client, tag)


def _forget_unacked(client: Any, tag: str) -> None:
    """Drop a message's unacknowledged entry; no MULTI: a full Redis refuses every one."""
    client.pipeline(transaction=False).zrem(keys.UNACKED_INDEX, tag).hdel(
        keys.UNACKED, tag
    ).execute()


def _lease_if_finished(store: Store, exp_id: str) -> float | None:
    try:
        finished = store.experiments.info(exp_id).finished_at is not None
    except ExperimentNotFound:  # deleted: its worker drops the message when handed it
        return None
    return store.experiments.matrix(exp_id).lease_s if finished else None
