"""The experiment records in Redis, under DESIGN.md's keys (no TTL on any of them).

``experiments`` zset by created time; ``exp:{id}`` hash (info, matrix, counts,
status, and once every run is on the broker ``sent``: their default queue);
``exp:{id}:runs`` run_id -> RunResult JSON; ``exp:{id}:specs`` run_id -> RunSpec
JSON (what resume re-sends); ``exp:{id}:attempts`` run_id -> deliveries;
``exp:{id}:leases`` run_id -> "EXPIRY HOLDER" of the runs in progress;
``exp:{id}:unaccounted`` run_id -> when a sweep first found the run nowhere
(worker/recovery.py); ``exp:{id}:health`` the first results of each tier, for
fail-fast (TIER + newline: the tier has a result of its own; TIER + newline +
REASON: how many of its runs ended with that infrastructure error);
``exp:{id}:halted`` tier -> the infrastructure error that stopped its runs;
``exp:{id}:report`` the ExperimentReport JSON.

Lease expiries are on the Redis server's clock (TIME), so the workers' and the
scheduler's clocks never have to agree.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from core.config import Matrix
from core.results import (
    ExperimentInfo,
    ExperimentReport,
    ExperimentStatus,
    RunResult,
    RunSpec,
    RunStatus,
)

DEFAULT_PREFIX = "evalfleet:"


def key_prefix() -> str:
    """The prefix of our keys and of Celery's result keys (EVALFLEET_KEY_PREFIX), so
    fleets or test sessions sharing one Redis database keep apart what they write."""
    return os.environ.get("EVALFLEET_KEY_PREFIX", DEFAULT_PREFIX)


# Storing a run and counting it must be one step: a redelivered run that
# finishes late must neither overwrite the first result nor be counted twice.
# A delivery whose lease another delivery has taken over stores nothing: only
# the newest delivery's result counts. One whose lapsed lease was only marked
# (expiry 0: sent again, not started) still may. The save ends the lease.
# ARGV: run id, result JSON, '1' when passed, the counter its status adds to ('' for none).
_SAVE_RUN = """
if ARGV[5] ~= '' then
  local lease = redis.call('HGET', KEYS[3], ARGV[1])
  if lease then
    local expiry, holder = string.match(lease, '^(%S+) (%S+)$')
    if holder ~= ARGV[5] and tonumber(expiry) > 0 then return 0 end
    redis.call('HDEL', KEYS[3], ARGV[1])
  end
end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[2], 'done', 1)
if ARGV[3] == '1' then redis.call('HINCRBY', KEYS[2], 'passes', 1) end
if ARGV[4] ~= '' then redis.call('HINCRBY', KEYS[2], ARGV[4], 1) end
return 1
"""

# Taking a lease: ARGV[1] run, ARGV[2] holder, ARGV[3] seconds, in the hash named
# by the script's lease key.
_TAKE = """
local now = redis.call('TIME')
local expiry = tonumber(now[1]) + tonumber(now[2]) / 1000000 + tonumber(ARGV[3])
redis.call('HSET', {leases}, ARGV[1], string.format('%.3f', expiry) .. ' ' .. ARGV[2])
"""

# A run's lease: ARGV[4] = 'take' (whoever held it before), or, only while
# still ours, 'renew' or 'release'.
_LEASE = """
if ARGV[4] ~= 'take' then
  local lease = redis.call('HGET', KEYS[1], ARGV[1])
  if not lease or string.match(lease, ' (%S+)$') ~= ARGV[2] then return 0 end
  if ARGV[4] == 'release' then return redis.call('HDEL', KEYS[1], ARGV[1]) end
end
{take}
return 1
"""

# A delivery's first step, in one round trip: the stored result if the run has
# one (then nothing else happens), else count the delivery, take the lease
# (ARGV[2] holder, ARGV[3] seconds) and return {'', attempts, experiment status,
# why the run's tier (ARGV[4]) was stopped, if it was}.
_BEGIN_DELIVERY = """
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if stored then return {{stored}} end
local attempts = redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
{take}
return {{'', attempts, redis.call('HGET', KEYS[4], 'status') or '',
         redis.call('HGET', KEYS[5], ARGV[4]) or ''}}
"""

# Fail-fast (ARGV[1] tier, ARGV[2] the infrastructure error of a finished run, ''
# for a result of the agent's own, ARGV[3] threshold): a tier whose first
# results are ARGV[3] times the same infrastructure error, and nothing else yet,
# is stopped. Returns the reason when this call stopped it.
_NOTE_HEALTH = """
local healthy = ARGV[1] .. '\\n'
if ARGV[2] == '' then redis.call('HSET', KEYS[1], healthy, 1) return false end
if redis.call('HEXISTS', KEYS[1], healthy) == 1 then return false end
local seen = redis.call('HINCRBY', KEYS[1], healthy .. ARGV[2], 1)
local threshold = tonumber(ARGV[3])
if threshold > 0 and seen >= threshold and redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 1
then return ARGV[2] end
return false
"""

# Resume of a cancelled experiment: ARGV are runs recorded as cancelled; each
# loses its result and its delivery count, and the counters go back down.
_UNCANCEL = """
local n = 0
for i = 1, #ARGV do
  if redis.call('HDEL', KEYS[1], ARGV[i]) == 1 then n = n + 1 end
  redis.call('HDEL', KEYS[2], ARGV[i])
end
redis.call('HINCRBY', KEYS[3], 'done', -n)
redis.call('HINCRBY', KEYS[3], 'cancelled', -n)
redis.call('HDEL', KEYS[3], 'finished_at', 'sent')
return n
"""

# Expired leases of runs without a result are returned, once (concurrent sweepers
# each get a different, possibly empty, share) and marked RESENT: the run is in
# the queue again, which the lease of its next delivery replaces. Expired leases
# of finished runs leave the table.
_CLAIM_LOST = """
local now = redis.call('TIME')
now = tonumber(now[1]) + tonumber(now[2]) / 1000000
local lost = {}
local leases = redis.call('HGETALL', KEYS[1])
for i = 1, #leases, 2 do
  local run, expiry, holder = leases[i], string.match(leases[i + 1], '^(%S+) (%S+)$')
  if tonumber(expiry) < now and holder ~= ARGV[1] then
    if redis.call('HEXISTS', KEYS[2], run) == 1 then
      redis.call('HDEL', KEYS[1], run)
    else
      redis.call('HSET', KEYS[1], run, '0 ' .. ARGV[1])
      lost[#lost + 1] = run
    end
  end
end
return lost
"""
RESENT = "resent"

# ARGV[2..] are the runs a sweep found nowhere (no result, lease, or message).
# Runs it no longer reports leave the table; those it has reported for ARGV[1]
# seconds or longer are returned once (whichever sweeper comes first) and leave it.
_TRACK_UNACCOUNTED = """
local now = redis.call('TIME')
now = tonumber(now[1]) + tonumber(now[2]) / 1000000
local current = {}
for i = 2, #ARGV do current[ARGV[i]] = true end
local seen = redis.call('HGETALL', KEYS[1])
for i = 1, #seen, 2 do
  if not current[seen[i]] then redis.call('HDEL', KEYS[1], seen[i]) end
end
local overdue = {}
for i = 2, #ARGV do
  local since = redis.call('HGET', KEYS[1], ARGV[i])
  if not since then
    redis.call('HSET', KEYS[1], ARGV[i], string.format('%.3f', now))
  elseif now - tonumber(since) >= tonumber(ARGV[1]) then
    redis.call('HDEL', KEYS[1], ARGV[i])
    overdue[#overdue + 1] = ARGV[i]
  end
end
return overdue
"""


@dataclass(frozen=True)
class Delivery:
    """What a delivery of a run finds when it starts (Store.begin_delivery)."""

    stored: RunResult | None = None  # the run's result, when it has one already
    attempts: int = 0  # deliveries so far, this one included
    status: ExperimentStatus = ExperimentStatus.running
    halted: str | None = None  # why fail-fast stopped the run's tier


@dataclass
class Leases:
    live: set[str] = field(default_factory=set)  # in progress somewhere
    lapsed: set[str] = field(default_factory=set)  # expired: lost, or sent again


class ExperimentNotFound(KeyError):
    def __str__(self) -> str:
        return f"no experiment {self.args[0]!r} in this store (see `scheduler list`)"


class Store:
    def __init__(self, client: redis.Redis, prefix: str | None = None, url: str | None = None):
        self.url = url  # the broker's URL, password included: redacted from every result
        # redis-py's response types are unions of every protocol's shapes; the
        # client always decodes to str here, so treat replies as such.
        self.redis: Any = client
        self.prefix = prefix if prefix is not None else key_prefix()
        self._save_run = client.register_script(_SAVE_RUN)
        self._lease = client.register_script(_LEASE.format(take=_TAKE.format(leases="KEYS[1]")))
        self._begin_delivery = client.register_script(
            _BEGIN_DELIVERY.format(take=_TAKE.format(leases="KEYS[3]"))
        )
        self._claim_lost = client.register_script(_CLAIM_LOST)
        self._note_health = client.register_script(_NOTE_HEALTH)
        self._uncancel = client.register_script(_UNCANCEL)
        self._track_unaccounted = client.register_script(_TRACK_UNACCOUNTED)

    @classmethod
    def from_url(cls, url: str, prefix: str | None = None) -> Store:
        return cls(redis.Redis.from_url(url, decode_responses=True), prefix, url)

    def _key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    # --- experiments ---------------------------------------------------------------

    def create_experiment(
        self, info: ExperimentInfo, matrix: Matrix, specs: Sequence[RunSpec] = ()
    ) -> None:
        """The experiment's record, with `specs`; a submit streams them in batches
        instead (add_specs)."""
        key = self._key("exp", info.id)
        pipe = self.redis.pipeline()
        pipe.hset(
            key,
            mapping={
                "info": info.model_dump_json(),
                "matrix": matrix.model_dump_json(),
                "status": info.status.value,
                "total": info.total_runs,
                "done": 0,
                "passes": 0,
                "errors": 0,
            },
        )
        pipe.zadd(self._key("experiments"), {info.id: info.created_at})
        pipe.execute()
        self.add_specs(info.id, specs)

    def add_specs(self, exp_id: str, specs: Sequence[RunSpec]) -> None:
        """Record runs of the experiment (what resume and recovery send again)."""
        if specs:
            self.redis.hset(
                self._key("exp", exp_id, "specs"),
                mapping={s.run_id: s.model_dump_json() for s in specs},
            )

    def exists(self, exp_id: str) -> bool:
        return bool(self.redis.exists(self._key("exp", exp_id)))

    def info(self, exp_id: str) -> ExperimentInfo:
        """The experiment's info with live status and counts."""
        raw = self.redis.hgetall(self._key("exp", exp_id))
        if not raw:
            raise ExperimentNotFound(exp_id)
        info = ExperimentInfo.model_validate_json(raw["info"])
        return info.model_copy(
            update={
                "status": ExperimentStatus(raw["status"]),
                "completed_runs": int(raw.get("done", 0)),
                "passes": int(raw.get("passes", 0)),
                "errors": int(raw.get("errors", 0)),
                "cancelled": int(raw.get("cancelled", 0)),
                "finished_at": float(raw["finished_at"]) if raw.get("finished_at") else None,
            }
        )

    def matrix(self, exp_id: str) -> Matrix:
        raw = self.redis.hget(self._key("exp", exp_id), "matrix")
        if raw is None:
            raise ExperimentNotFound(exp_id)
        # Paths were resolved and checked at submit; a worker on another machine
        # reports a missing file when it uses it, per run.
        return Matrix.model_validate(json.loads(raw), context={"check_files": False})

    def set_status(
        self, exp_id: str, status: ExperimentStatus, finished_at: float | None = None
    ) -> None:
        mapping: dict[str, Any] = {"status": status.value}
        if finished_at is not None:
            mapping["finished_at"] = finished_at
        self.redis.hset(self._key("exp", exp_id), mapping=mapping)

    def reopen(self, exp_id: str) -> None:
        """Back to running for a resume; the next aggregation sets finished_at again."""
        key = self._key("exp", exp_id)
        self.redis.hset(key, "status", ExperimentStatus.running.value)
        self.redis.hdel(key, "finished_at", "sent")

    def mark_sent(self, exp_id: str, default_queue: str) -> None:
        """Every run of the experiment is on the broker, those without a queue of
        their own in `default_queue`: from now on, one that is nowhere was lost
        (worker/recovery.py)."""
        self.redis.hset(self._key("exp", exp_id), "sent", default_queue)

    def sent_to(self, exp_id: str) -> str | None:
        """The default queue the experiment's runs were sent to; None while sending."""
        queue = self.redis.hget(self._key("exp", exp_id), "sent")
        return str(queue) if queue else None

    def status(self, exp_id: str) -> ExperimentStatus | None:
        raw = self.redis.hget(self._key("exp", exp_id), "status")
        return ExperimentStatus(raw) if raw else None

    def list_experiments(self) -> list[ExperimentInfo]:
        ids = self.redis.zrange(self._key("experiments"), 0, -1)
        return [self.info(exp_id) for exp_id in ids if self.exists(exp_id)]

    def latest(self) -> str | None:
        ids = self.redis.zrange(self._key("experiments"), -1, -1)
        return ids[0] if ids else None

    def active_experiments(self, recent: int = 1000) -> list[str]:
        """Experiments not yet aggregated (no finished_at), among the `recent` latest."""
        ids = self.redis.zrange(self._key("experiments"), -recent, -1)
        pipe = self.redis.pipeline()
        for exp_id in ids:
            pipe.hmget(self._key("exp", exp_id), "status", "finished_at")
        states = pipe.execute()
        return [
            i for i, (status, finished) in zip(ids, states, strict=True) if status and not finished
        ]

    # --- runs ------------------------------------------------------------------------

    def specs(self, exp_id: str) -> list[RunSpec]:
        raw = self.redis.hvals(self._key("exp", exp_id, "specs"))
        specs = [RunSpec.model_validate_json(v) for v in raw]
        return sorted(specs, key=lambda s: (s.tier, s.scenario, s.run_index))

    def pending_specs(self, exp_id: str) -> list[RunSpec]:
        """Runs without a result and not in progress (in progress: a lease not yet expired)."""
        skip = set(self.redis.hkeys(self._key("exp", exp_id, "runs"))) | self.live_leases(exp_id)
        return [s for s in self.specs(exp_id) if s.run_id not in skip]

    def save_run(self, result: RunResult, holder: str = "") -> bool:
        """Store a final result; False (and nothing changed) when one is already stored,
        or when `holder` no longer holds the run's lease (another delivery took it over)."""
        stored = self._save_run(
            keys=[
                self._key("exp", result.experiment_id, "runs"),
                self._key("exp", result.experiment_id),
                self._key("exp", result.experiment_id, "leases"),
            ],
            args=[
                result.run_id,
                result.model_dump_json(),
                "1" if result.passed else "0",
                # The counter this outcome adds to, besides `done`.
                "errors"
                if result.is_infra_error
                else "cancelled"
                if result.status is RunStatus.cancelled
                else "",
                holder,
            ],
        )
        return bool(stored)

    def run(self, exp_id: str, run_id: str) -> RunResult | None:
        raw = self.redis.hget(self._key("exp", exp_id, "runs"), run_id)
        return RunResult.model_validate_json(raw) if raw else None

    def runs(self, exp_id: str) -> list[RunResult]:
        raw = self.redis.hvals(self._key("exp", exp_id, "runs"))
        runs = [RunResult.model_validate_json(v) for v in raw]
        return sorted(runs, key=lambda r: (r.tier, r.scenario, r.run_index))

    def begin_delivery(
        self, exp_id: str, run_id: str, holder: str, lease_s: float, tier: str = ""
    ) -> Delivery:
        """A delivery of a run starts: its stored result, if it has one; else the
        delivery is counted and `holder` takes the run's lease for `lease_s`."""
        reply = self._begin_delivery(
            keys=[
                self._key("exp", exp_id, "runs"),
                self._key("exp", exp_id, "attempts"),
                self._key("exp", exp_id, "leases"),
                self._key("exp", exp_id),
                self._key("exp", exp_id, "halted"),
            ],
            args=[run_id, holder, lease_s, tier],
        )
        if reply[0]:
            return Delivery(stored=RunResult.model_validate_json(reply[0]))
        return Delivery(
            attempts=int(reply[1]),
            status=ExperimentStatus(reply[2] or "running"),
            halted=reply[3] or None,
        )

    def note_health(self, exp_id: str, tier: str, infra_error: str | None, threshold: int) -> bool:
        """Count a finished run toward its tier's fail-fast check (`infra_error`: the
        run's infrastructure error, None for a result of the agent's own). True when
        this run stopped the tier."""
        stopped = self._note_health(
            keys=[self._key("exp", exp_id, "health"), self._key("exp", exp_id, "halted")],
            args=[tier, infra_error or "", threshold],
        )
        return bool(stopped)

    def halted_tiers(self, exp_id: str) -> dict[str, str]:
        """Tiers fail-fast stopped, with the infrastructure error that stopped each."""
        return dict(self.redis.hgetall(self._key("exp", exp_id, "halted")))

    def uncancel(self, exp_id: str) -> list[RunSpec]:
        """The runs recorded as cancelled, made pending again (result and delivery count
        removed) for a resume; returns their specs."""
        cancelled = [r.run_id for r in self.runs(exp_id) if r.status is RunStatus.cancelled]
        if cancelled:
            self._uncancel(
                keys=[
                    self._key("exp", exp_id, "runs"),
                    self._key("exp", exp_id, "attempts"),
                    self._key("exp", exp_id),
                ],
                args=cancelled,
            )
        return self._specs(exp_id, cancelled)

    # --- leases: which runs are in progress, and which were lost -------------------------

    def take_lease(self, exp_id: str, run_id: str, holder: str, seconds: float) -> None:
        """The run is `holder`'s for `seconds`, whoever held it before."""
        self._lease(
            keys=[self._key("exp", exp_id, "leases")], args=[run_id, holder, seconds, "take"]
        )

    def renew_lease(self, exp_id: str, run_id: str, holder: str, seconds: float) -> bool:
        """Extend `holder`'s lease; False when it is no longer theirs."""
        key = self._key("exp", exp_id, "leases")
        return bool(self._lease(keys=[key], args=[run_id, holder, seconds, "renew"]))

    def give_back_lease(self, exp_id: str, run_id: str, holder: str) -> None:
        """End `holder`'s lease without a result: the run's message went back to the queue."""
        key = self._key("exp", exp_id, "leases")
        self._lease(keys=[key], args=[run_id, holder, 0, "release"])

    def leases(self, exp_id: str) -> Leases:
        """The runs with a lease entry, by whether it is live (the Redis server's clock)."""
        seconds, micros = self.redis.time()
        now = seconds + micros / 1e6
        leases = Leases()
        for run, lease in self.redis.hgetall(self._key("exp", exp_id, "leases")).items():
            (leases.live if float(lease.split(" ", 1)[0]) >= now else leases.lapsed).add(run)
        return leases

    def live_leases(self, exp_id: str) -> set[str]:
        """Runs whose lease has not expired: in progress somewhere."""
        return self.leases(exp_id).live

    def claim_lost_runs(self, exp_id: str) -> list[RunSpec]:
        """Runs whose lease expired without a result, each handed to one caller only."""
        run_ids = self._claim_lost(
            keys=[self._key("exp", exp_id, "leases"), self._key("exp", exp_id, "runs")],
            args=[RESENT],
        )
        return self._specs(exp_id, run_ids)

    def unfinished_runs(self, exp_id: str) -> set[str]:
        """Run ids without a stored result."""
        pipe = self.redis.pipeline()
        pipe.hkeys(self._key("exp", exp_id, "specs"))
        pipe.hkeys(self._key("exp", exp_id, "runs"))
        specs, done = pipe.execute()
        return set(specs) - set(done)

    def claim_unaccounted(
        self, exp_id: str, run_ids: Iterable[str], seconds: float
    ) -> list[RunSpec]:
        """Runs a sweep found nowhere (`run_ids`) that every sweep for `seconds` or
        longer has found nowhere, each handed to one caller only."""
        overdue = self._track_unaccounted(
            keys=[self._key("exp", exp_id, "unaccounted")], args=[seconds, *sorted(run_ids)]
        )
        return self._specs(exp_id, overdue)

    def _specs(self, exp_id: str, run_ids: Sequence[str]) -> list[RunSpec]:
        if not run_ids:
            return []
        raw = self.redis.hmget(self._key("exp", exp_id, "specs"), run_ids)
        return [RunSpec.model_validate_json(spec) for spec in raw if spec is not None]

    def mark_lost(self, exp_id: str, run_id: str) -> None:
        """Put a claimed run back as lost (its re-send failed): the next sweep claims it."""
        self.redis.hset(self._key("exp", exp_id, "leases"), run_id, "0 lost")

    # --- report --------------------------------------------------------------------------

    def save_report(self, report: ExperimentReport) -> None:
        self.redis.set(self._key("exp", report.experiment.id, "report"), report.model_dump_json())

    def report(self, exp_id: str) -> ExperimentReport | None:
        raw = self.redis.get(self._key("exp", exp_id, "report"))
        return ExperimentReport.model_validate_json(raw) if raw else None
