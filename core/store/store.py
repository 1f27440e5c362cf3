"""The experiment records in Redis: DESIGN.md's keys (named in core/store/keys.py), no TTL.

Every step that must be atomic is one Lua script (core/store/scripts.py); leases have
their own module (core/store/leases.py), reached as `store.leases`.
"""

from __future__ import annotations

import contextlib
import gc
import json
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import redis

from core.evaluation.judge import CachedJudgment
from core.evidence.models import Attempt, RunEvidence
from core.files.archive import ArchivedWorkspace
from core.files.bundle import Bundle, Manifest
from core.matrix import Matrix
from core.results.report import ExperimentInfo, ExperimentReport, ExperimentStatus
from core.results.run import RunResult, RunSpec, RunStatus
from core.store import scripts
from core.store.keys import Keys, key_prefix
from core.store.leases import Leases
from core.store.ledger import Ledger


@dataclass(frozen=True)
class Delivery:
    """What a delivery of a run finds when it starts (Store.begin_delivery)."""

    stored: RunResult | None = None  # the run's result, when it has one already
    attempts: int = 0  # deliveries so far, this one included
    status: ExperimentStatus = ExperimentStatus.running
    halted: str | None = None  # why fail-fast stopped the run's tier
    # The run's deliveries so far, this one last (its outcome not yet known).
    deliveries: list[Attempt] = field(default_factory=list)


# An evidence value that is not a blob but where the blob is: the experiment's
# artifacts folder (zlib data never starts so).
FILE_POINTER = b"file:"
NO_CAP = 1 << 62
# What a delivery that recorded no end is known to have done.
NO_RESULT = "ended without a result (its worker was killed or lost, or a later delivery took over)"
# The order runs are read in: by tier, scenario and index.
_RUN_ORDER = attrgetter("tier", "scenario", "run_index")


@dataclass(frozen=True)
class SavedEvidence:
    kept: Literal["whole", "minimal"]
    bytes: int  # counted toward the experiment's cap
    path: Path | None = None  # the file, when the evidence went to the artifacts folder


class ExperimentNotFound(KeyError):
    def __str__(self) -> str:
        return f"no experiment {self.args[0]!r} in this store (see `scheduler list`)"


class Store:
    def __init__(self, client: redis.Redis, prefix: str | None = None, url: str | None = None):
        self.url = url  # the broker's URL, password included: redacted from every result
        # redis-py's response types are unions of every protocol's shapes; the
        # client always decodes to str here, so treat replies as such.
        self.redis: Any = client
        self.keys = Keys(prefix if prefix is not None else key_prefix())
        self.leases = Leases(client, self.keys)
        self.ledger = Ledger(client, self.keys)
        # Compressed blobs (evidence, files) are bytes: a client of the same
        # connection settings that leaves replies undecoded.
        pool = client.connection_pool
        kwargs = dict(pool.connection_kwargs, decode_responses=False)
        binary_pool = redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
        self.binary: Any = redis.Redis(connection_pool=binary_pool)
        self._save_run = client.register_script(scripts.SAVE_RUN)
        self._begin_delivery = client.register_script(scripts.BEGIN_DELIVERY)
        self._end_delivery = client.register_script(scripts.END_DELIVERY)
        self._save_evidence = self.binary.register_script(scripts.SAVE_EVIDENCE)
        self._note_health = client.register_script(scripts.NOTE_HEALTH)
        self._unrecord = client.register_script(scripts.UNRECORD)
        self._track_unaccounted = client.register_script(scripts.TRACK_UNACCOUNTED)
        self._claim_wave = client.register_script(scripts.CLAIM_WAVE)

    @classmethod
    def from_url(cls, url: str, prefix: str | None = None) -> Store:
        return cls(redis.Redis.from_url(url, decode_responses=True), prefix, url)

    # --- experiments ---------------------------------------------------------------

    def create_experiment(
        self,
        info: ExperimentInfo,
        matrix: Matrix,
        specs: Sequence[RunSpec] = (),
        manifest: Manifest | None = None,
    ) -> None:
        """The experiment's record, with `specs`; a submit streams them in batches
        instead (add_specs). `manifest`: its files, saved before (save_bundle)."""
        key = self.keys.experiment(info.id)
        record = {
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
            self.ledger.set_limits(info.id, matrix.budget)
        self.add_specs(info.id, specs)

    def add_specs(self, exp_id: str, specs: Sequence[RunSpec]) -> None:
        """Record runs of the experiment (what resume and recovery send again).

        Stored without what the key and field already say (the experiment and run
        ids) and without defaults: a third of the bytes, every run of every
        experiment (docs/SCALE.md)."""
        if specs:
            self.redis.hset(
                self.keys.specs(exp_id),
                mapping={
                    s.run_id: s.model_dump_json(
                        exclude={"experiment_id", "run_id"}, exclude_defaults=True
                    )
                    for s in specs
                },
            )

    def exists(self, exp_id: str) -> bool:
        return bool(self.redis.exists(self.keys.experiment(exp_id)))

    def info(self, exp_id: str) -> ExperimentInfo:
        """The experiment's info with live status and counts."""
        raw = self.redis.hgetall(self.keys.experiment(exp_id))
        if not raw:
            raise ExperimentNotFound(exp_id)
        info = ExperimentInfo.model_validate_json(raw["info"])
        return info.model_copy(
            update={
                # An adaptive experiment's total drops as its cells close (worker/waves.py).
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
        where this machine has the file (core/files/bundle.py)."""
        raw = self.redis.hget(self.keys.experiment(exp_id), "matrix")
        if raw is None:
            raise ExperimentNotFound(exp_id)
        # Paths were resolved and checked at submit; a worker on another machine
        # reports a missing file when it uses it, per run.
        context = {"check_files": False, "relocate": relocate}
        return Matrix.model_validate(json.loads(raw), context=context)

    def set_status(
        self, exp_id: str, status: ExperimentStatus, finished_at: float | None = None
    ) -> None:
        mapping: dict[str, Any] = {"status": status.value}
        if finished_at is not None:
            mapping["finished_at"] = finished_at
        pipe = self.redis.pipeline()
        pipe.hset(self.keys.experiment(exp_id), mapping=mapping)
        pipe.publish(self.keys.status_channel(exp_id), status.value)
        pipe.execute()

    def status_changes(self, exp_id: str) -> Any:
        """A subscription to the experiment's status changes (set_status): a redis-py
        PubSub whose get_message(timeout=...) waits for the next one."""
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(self.keys.status_channel(exp_id))
        return pubsub

    def reopen(self, exp_id: str) -> None:
        """Back to running for a resume; the next aggregation sets finished_at again."""
        key = self.keys.experiment(exp_id)
        self.redis.hset(key, "status", ExperimentStatus.running.value)
        self.redis.hdel(key, "finished_at", "sent")

    def mark_sent(self, exp_id: str, default_queue: str) -> None:
        """Every run of the experiment is on the broker, those without a queue of
        their own in `default_queue`: from now on, one that is nowhere was lost
        (worker/recovery.py)."""
        self.redis.hset(self.keys.experiment(exp_id), "sent", default_queue)

    def note_chord(self, exp_id: str, group_id: str) -> None:
        """The experiment's runs go out in chord `group_id` (a submit, each resume):
        deleting the experiment removes that chord's Celery keys too."""
        key = self.keys.experiment(exp_id)
        chords = self.redis.hget(key, "chords") or ""
        self.redis.hset(key, "chords", f"{chords} {group_id}".strip())

    def sent_to(self, exp_id: str) -> str | None:
        """The default queue the experiment's runs were sent to; None while sending."""
        queue = self.redis.hget(self.keys.experiment(exp_id), "sent")
        return str(queue) if queue else None

    def list_experiments(self) -> list[ExperimentInfo]:
        ids = self.redis.zrange(self.keys.experiments(), 0, -1)
        return [self.info(exp_id) for exp_id in ids if self.exists(exp_id)]

    def latest(self) -> str | None:
        ids = self.redis.zrange(self.keys.experiments(), -1, -1)
        return ids[0] if ids else None

    def active_experiments(self, recent: int = 1000) -> list[str]:
        """Experiments not yet aggregated (no finished_at), among the `recent` latest."""
        ids = self.redis.zrange(self.keys.experiments(), -recent, -1)
        pipe = self.redis.pipeline()
        for exp_id in ids:
            pipe.hmget(self.keys.experiment(exp_id), "status", "finished_at")
        states = pipe.execute()
        return [
            i for i, (status, finished) in zip(ids, states, strict=True) if status and not finished
        ]

    # --- runs ------------------------------------------------------------------------

    def specs(self, exp_id: str) -> list[RunSpec]:
        raw = self.redis.hgetall(self.keys.specs(exp_id))
        specs = [_spec(exp_id, run_id, v) for run_id, v in raw.items()]
        return sorted(specs, key=lambda s: (s.tier, s.scenario, s.run_index))

    def recorded_runs(self, exp_id: str) -> int:
        """How many runs were recorded to be sent (an adaptive experiment's waves so far)."""
        return int(self.redis.hlen(self.keys.specs(exp_id)))

    def has_run(self, exp_id: str, run_id: str) -> bool:
        """A run the experiment planned (with a result or not)."""
        return bool(self.redis.hexists(self.keys.specs(exp_id), run_id))

    def run_ids_ending(self, suffix: str, recent: int = 100) -> list[str]:
        """The ids of runs that end with `suffix`, in the `recent` latest experiments."""
        pattern = "*" + "".join(f"\\{c}" if c in "\\*?[]" else c for c in suffix)
        found: list[str] = []
        for exp_id in reversed(self.redis.zrange(self.keys.experiments(), -recent, -1)):
            found += [k for k, _ in self.redis.hscan_iter(self.keys.specs(exp_id), match=pattern)]
        return found

    def pending_specs(self, exp_id: str) -> list[RunSpec]:
        """Runs without a result and not in progress (in progress: a lease not yet expired)."""
        skip = set(self.redis.hkeys(self.keys.runs(exp_id))) | self.leases.live(exp_id)
        return [s for s in self.specs(exp_id) if s.run_id not in skip]

    def save_run(self, result: RunResult, holder: str = "") -> bool:
        """Store a final result; False (and nothing changed) when one is already stored,
        or when `holder` no longer holds the run's lease (another delivery took it over).

        Fields at their defaults are left out (reading fills them in again): a
        no-op run's result takes 0.7 KB instead of 1.6 KB."""
        stored = self._save_run(
            keys=[
                self.keys.runs(result.experiment_id),
                self.keys.experiment(result.experiment_id),
                self.keys.leases(result.experiment_id),
            ],
            args=[
                result.run_id,
                result.model_dump_json(exclude_defaults=True),
                "1" if result.passed else "0",
                # The counter this outcome adds to, besides `done`.
                "errors"
                if result.is_infra_error
                else result.status.value
                if result.status in (RunStatus.cancelled, RunStatus.not_run)
                else "",
                holder,
            ],
        )
        return bool(stored == "saved")

    def run(self, exp_id: str, run_id: str) -> RunResult | None:
        raw = self.redis.hget(self.keys.runs(exp_id), run_id)
        return RunResult.model_validate_json(raw) if raw else None

    def runs(self, exp_id: str) -> list[RunResult]:
        raw = self.redis.hvals(self.keys.runs(exp_id))
        with gc_paused():
            return sorted(map(RunResult.model_validate_json, raw), key=_RUN_ORDER)

    def begin_delivery(
        self,
        exp_id: str,
        run_id: str,
        holder: str,
        lease_s: float,
        tier: str = "",
        worker: str = "",
    ) -> Delivery:
        """A delivery of a run starts: its stored result, if it has one; else the
        delivery is counted and recorded as `worker`'s, and `holder` takes the run's
        lease for `lease_s`."""
        reply = self._begin_delivery(
            keys=[
                self.keys.runs(exp_id),
                self.keys.attempts(exp_id),
                self.keys.leases(exp_id),
                self.keys.experiment(exp_id),
                self.keys.halted(exp_id),
                self.keys.deliveries(exp_id),
            ],
            args=[run_id, holder, lease_s, tier, worker],
        )
        if reply[0] == "stored":
            return Delivery(stored=RunResult.model_validate_json(reply[1]))
        return Delivery(
            attempts=int(reply[1]),
            status=ExperimentStatus(reply[2] or "running"),
            halted=reply[3] or None,
            deliveries=_attempts(reply[4]),
        )

    def end_delivery(self, exp_id: str, run_id: str, number: int, outcome: str) -> None:
        """Delivery `number` (1: the first) of the run ended without a result, so: `outcome`."""
        self._end_delivery(keys=[self.keys.deliveries(exp_id)], args=[run_id, number, outcome])

    def deliveries(self, exp_id: str, run_id: str) -> list[Attempt]:
        """The run's deliveries so far, oldest first."""
        return _attempts(self.redis.hget(self.keys.deliveries(exp_id), run_id))

    def note_health(self, exp_id: str, tier: str, infra_error: str | None, threshold: int) -> bool:
        """Count a finished run toward its tier's fail-fast check (`infra_error`: the
        run's infrastructure error, None for a result of the agent's own). True when
        this run stopped the tier."""
        stopped = self._note_health(
            keys=[self.keys.health(exp_id), self.keys.halted(exp_id)],
            args=[tier, infra_error or "", threshold],
        )
        return bool(stopped == "stopped")

    def note_unrecognised(self, exp_id: str, tier: str, transcript_format: str) -> None:
        """A run of `tier` whose output its transcript parser did not recognise."""
        self.redis.hsetnx(self.keys.unrecognised(exp_id), tier, transcript_format)

    def unrecognised_tiers(self, exp_id: str) -> dict[str, str]:
        """Tiers with a run whose output was not in their transcript format, and the format."""
        return dict(self.redis.hgetall(self.keys.unrecognised(exp_id)))

    def halted_tiers(self, exp_id: str) -> dict[str, str]:
        """Tiers fail-fast stopped, with the infrastructure error that stopped each."""
        return dict(self.redis.hgetall(self.keys.halted(exp_id)))

    def unrecord(self, exp_id: str, status: RunStatus) -> list[RunSpec]:
        """The runs recorded as never started (`cancelled` or `not_run`), made pending
        again (result and delivery count removed) for a resume; returns their specs."""
        unstarted = [r.run_id for r in self.runs(exp_id) if r.status is status]
        if unstarted:
            self._unrecord(
                keys=[
                    self.keys.runs(exp_id),
                    self.keys.attempts(exp_id),
                    self.keys.experiment(exp_id),
                    self.keys.deliveries(exp_id),
                ],
                args=[status.value, *unstarted],
            )
        return self._specs(exp_id, unstarted)

    # --- adaptive waves (worker/waves.py) ------------------------------------------------

    def waves(self, exp_id: str) -> tuple[int, dict[tuple[str, str], str]]:
        """The number of the last wave sent, and the closed cells with why each stopped."""
        raw = self.redis.hgetall(self.keys.waves(exp_id))
        closed = {
            (tier, scenario): why
            for field, why in raw.items()
            if field != "wave"
            for tier, scenario in [field.split("\n", 1)]
        }
        return int(raw.get("wave", 1)), closed

    def claim_wave(
        self,
        exp_id: str,
        wave: int,
        fewer: int,
        closing: dict[tuple[str, str], str],
        specs: Sequence[RunSpec],
    ) -> str:
        """Record wave `wave + 1` (its runs, the cells it closes, the runs the total loses)
        if `wave` is still the last one and all its runs have results: 'claimed', else
        'in flight' or 'taken' (another sweeper was first)."""
        reply = self._claim_wave(
            keys=[
                self.keys.waves(exp_id),
                self.keys.runs(exp_id),
                self.keys.specs(exp_id),
                self.keys.experiment(exp_id),
            ],
            args=[
                wave,
                fewer,
                len(closing),
                *(
                    v
                    for (tier, scenario), why in closing.items()
                    for v in (f"{tier}\n{scenario}", why)
                ),
                *(v for spec in specs for v in (spec.run_id, spec.model_dump_json())),
            ],
        )
        return str(reply)

    # --- recovery: runs lost on the way ---------------------------------------------------

    def claim_lost_runs(self, exp_id: str) -> list[RunSpec]:
        """Runs whose lease expired without a result, each handed to one caller only."""
        return self._specs(exp_id, self.leases.claim_expired(exp_id))

    def unfinished_runs(self, exp_id: str) -> set[str]:
        """Run ids without a stored result."""
        pipe = self.redis.pipeline()
        pipe.hkeys(self.keys.specs(exp_id))
        pipe.hkeys(self.keys.runs(exp_id))
        specs, done = pipe.execute()
        return set(specs) - set(done)

    def claim_unaccounted(
        self, exp_id: str, run_ids: Iterable[str], seconds: float
    ) -> list[RunSpec]:
        """Runs a sweep found nowhere (`run_ids`) that every sweep for `seconds` or
        longer has found nowhere, each handed to one caller only."""
        overdue = self._track_unaccounted(
            keys=[self.keys.unaccounted(exp_id)], args=[seconds, *sorted(run_ids)]
        )
        return self._specs(exp_id, overdue)

    def _specs(self, exp_id: str, run_ids: Sequence[str]) -> list[RunSpec]:
        if not run_ids:
            return []
        raw = self.redis.hmget(self.keys.specs(exp_id), run_ids)
        return [
            _spec(exp_id, run_id, spec)
            for run_id, spec in zip(run_ids, raw, strict=True)
            if spec is not None
        ]

    # --- evidence ------------------------------------------------------------------------

    def save_evidence(
        self,
        evidence: RunEvidence,
        *,
        minimal: RunEvidence | None = None,
        cap_bytes: int | None = None,
        folder: Path | None = None,
    ) -> SavedEvidence:
        """Store a run's evidence (already bounded and redacted), compressed: in Redis,
        or with `folder` as a file there (Redis keeps its path). With `cap_bytes`, the
        experiment's cap: once its stored evidence would pass it, `minimal` (always in
        Redis) is stored instead."""
        blob = zlib.compress(evidence.model_dump_json().encode(), 6)
        value, path = blob, None
        if folder is not None:
            path = evidence_file(folder, evidence.experiment_id, evidence.run_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(blob)
            value = FILE_POINTER + str(path).encode()
        exp_id = evidence.experiment_id
        kept = self._save_evidence(
            keys=[self.keys.evidence(exp_id), self.keys.experiment(exp_id)],
            args=[evidence.run_id, value, len(blob), cap_bytes or NO_CAP],
        )
        if kept == b"whole":
            return SavedEvidence("whole", len(blob), path)
        if path is not None:
            path.unlink(missing_ok=True)
        small = blob if minimal is None else zlib.compress(minimal.model_dump_json().encode(), 6)
        pipe = self.binary.pipeline()  # a transaction: stored and counted together
        pipe.hset(self.keys.evidence(exp_id), evidence.run_id, small)
        pipe.hincrby(self.keys.experiment(exp_id), "evidence_bytes", len(small))
        pipe.execute()
        return SavedEvidence("minimal", len(small))

    def evidence(self, exp_id: str, run_id: str) -> RunEvidence | None:
        """Raises OSError when the evidence is a file this machine cannot read."""
        blob = self.binary.hget(self.keys.evidence(exp_id), run_id)
        return _evidence(blob) if blob else None

    def evidence_blob(self, exp_id: str, run_id: str) -> bytes | None:
        """A run's evidence as stored: its JSON, zlib-compressed (OSError as `evidence`)."""
        blob = self.binary.hget(self.keys.evidence(exp_id), run_id)
        return _evidence_blob(blob) if blob else None

    def all_evidence_blobs(self, exp_id: str) -> dict[str, bytes]:
        """Every stored run's evidence by run id, as stored (zlib-compressed JSON): a
        page passes it through to the browser, which inflates it (streamed: hscan)."""
        return {
            _text(run_id): _evidence_blob(blob)
            for run_id, blob in self.binary.hscan_iter(self.keys.evidence(exp_id))
        }

    # --- the experiment's files (core/files/bundle.py) -----------------------------------------

    def save_bundle(self, exp_id: str, bundle: Bundle) -> None:
        """The files of a new experiment, compressed, by digest; its manifest goes
        with its record (create_experiment)."""
        pipe = self.binary.pipeline(transaction=False)
        for digest, data in bundle.contents.items():
            pipe.hset(self.keys.files(exp_id), digest, zlib.compress(data, 6))
            if len(pipe) >= 100:
                pipe.execute()
        pipe.execute()

    def manifest(self, exp_id: str) -> Manifest | None:
        """The experiment's manifest; None for one submitted before files travelled."""
        raw = self.redis.hget(self.keys.experiment(exp_id), "files")
        return Manifest.model_validate_json(raw) if raw else None

    def files(self, exp_id: str, digests: list[str]) -> dict[str, bytes]:
        """The contents of the experiment's files with these digests (those stored)."""
        blobs = self.binary.hmget(self.keys.files(exp_id), digests) if digests else []
        return {d: zlib.decompress(b) for d, b in zip(digests, blobs, strict=True) if b}

    # --- archived workspaces (rescore) ---------------------------------------------------

    def save_workspace(self, exp_id: str, run_id: str, archive: ArchivedWorkspace) -> None:
        self.redis.hset(self.keys.workspaces(exp_id), run_id, archive.model_dump_json())

    def workspace(self, exp_id: str, run_id: str) -> ArchivedWorkspace | None:
        raw = self.redis.hget(self.keys.workspaces(exp_id), run_id)
        return ArchivedWorkspace.model_validate_json(raw) if raw else None

    def archived_runs(self, exp_id: str) -> int:
        return int(self.redis.hlen(self.keys.workspaces(exp_id)))

    # --- the judgment cache -------------------------------------------------------------

    def cached_judgment(self, key: str) -> CachedJudgment | None:
        raw = self.redis.hget(self.keys.judgments(), key)
        return CachedJudgment.model_validate_json(raw) if raw else None

    def cache_judgment(self, key: str, judgment: CachedJudgment) -> None:
        self.redis.hset(self.keys.judgments(), key, judgment.model_dump_json())

    # --- report --------------------------------------------------------------------------

    def save_report(self, report: ExperimentReport) -> None:
        """Version 1 (the runs' own report) may be written again (resume); a later
        version is written once."""
        exp_id = report.experiment.id
        if report.version == 1:
            self.redis.set(self.keys.report(exp_id), report.model_dump_json())
        else:
            self.redis.hsetnx(self.keys.reports(exp_id), report.version, report.model_dump_json())

    def report(self, exp_id: str, version: int = 1) -> ExperimentReport | None:
        if version == 1:
            raw = self.redis.get(self.keys.report(exp_id))
        else:
            raw = self.redis.hget(self.keys.reports(exp_id), version)
        return ExperimentReport.model_validate_json(raw) if raw else None

    def report_versions(self, exp_id: str) -> list[int]:
        """The versions whose report is stored, oldest first."""
        later = sorted(int(v) for v in self.redis.hkeys(self.keys.reports(exp_id)))
        return [1, *later] if self.redis.exists(self.keys.report(exp_id)) else later

    # --- later versions: rejudge ---------------------------------------------------------

    def new_version(self, exp_id: str) -> int:
        """The number of the experiment's next report version (2, 3, ...), taken atomically."""
        return 1 + int(self.redis.hincrby(self.keys.experiment(exp_id), "versions", 1))

    def save_version_run(self, version: int, result: RunResult) -> bool:
        """A run's result in a later version; False when it has one there already."""
        key = self.keys.version_runs(result.experiment_id, version)
        return bool(self.redis.hsetnx(key, result.run_id, result.model_dump_json()))

    def version_run(self, exp_id: str, version: int, run_id: str) -> RunResult | None:
        raw = self.redis.hget(self.keys.version_runs(exp_id, version), run_id)
        return RunResult.model_validate_json(raw) if raw else None

    def version_run_count(self, exp_id: str, version: int) -> int:
        return int(self.redis.hlen(self.keys.version_runs(exp_id, version)))

    def version_runs(self, exp_id: str, version: int) -> list[RunResult]:
        raw = self.redis.hvals(self.keys.version_runs(exp_id, version))
        with gc_paused():
            return sorted(map(RunResult.model_validate_json, raw), key=_RUN_ORDER)


def evidence_file(folder: Path, exp_id: str, run_id: str) -> Path:
    """Where a run's evidence goes in an artifacts folder: one folder per experiment
    (what deleting the experiment removes), one file per run."""
    return folder / exp_id / f"{quote(run_id, safe='')}.json.z"


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cycle collector off while 100,000s of objects are made, none of them
    garbage: it would walk the growing heap every few hundred of them (reading
    100,000 results took 3-4 times as long). As a decorator (`@gc_paused()`) it
    also covers the function's locals being freed, so runs it read and dropped are
    never walked at all."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _spec(exp_id: str, run_id: str, raw: str) -> RunSpec:
    """A spec as add_specs stored it, its ids given back."""
    return RunSpec.model_validate({**json.loads(raw), "experiment_id": exp_id, "run_id": run_id})


def _evidence(blob: bytes) -> RunEvidence:
    return RunEvidence.model_validate_json(zlib.decompress(_evidence_blob(blob)))


def _evidence_blob(blob: bytes) -> bytes:
    if blob.startswith(FILE_POINTER):
        return Path(blob[len(FILE_POINTER) :].decode()).read_bytes()
    return blob


def _attempts(raw: str | None) -> list[Attempt]:
    """A run's record of deliveries; one without a recorded end did not store a result."""
    entries = json.loads(raw) if raw else []
    # An empty Lua table encodes as an object, {}.
    return [Attempt.model_validate({"outcome": NO_RESULT, **entry}) for entry in entries or []]


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw
