"""The experiment records in Redis, no TTL: one small class per structure or
concern, each named after what it keeps and reached from the Store facade
(`store.results.save(result)`, `store.experiments.info(exp_id)`); every key is
named in core.store.keys, every step that must be atomic is one Lua script in
core.store.scripts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from redis.client import PubSub

from core.evidence.models import Attempt, RunEvidence
from core.files.bundle import Bundle, Manifest
from core.matrix import Matrix
from core.results.report import ExperimentInfo, ExperimentReport, ExperimentStatus
from core.results.run import RunResult, RunSpec, RunStatus
from core.store.attempts import Attempts
from core.store.bundles import Bundles
from core.store.client import BinaryClient, TextClient, connect
from core.store.experiments import Experiments
from core.store.health import Health
from core.store.judgments import Judgments
from core.store.keys import Keys, key_prefix
from core.store.leases import Leases
from core.store.ledger import Ledger
from core.store.reports import Reports
from core.store.results import Results
from core.store.run_evidence import Evidence
from core.store.specs import Specs
from core.store.waves import Waves
from core.store.workspaces import Workspaces


class Store:
    """One Redis database's records under one key prefix. The classes share the
    facade's two clients (replies as str, and as bytes for compressed blobs), so
    a process holds one connection pool of each per broker."""

    def __init__(
        self,
        client: TextClient,
        binary: BinaryClient,
        prefix: str | None = None,
        url: str | None = None,
    ):
        self.url = url  # the broker's URL, password included: redacted from every result
        self.redis = client
        self.binary = binary
        self.keys = keys = Keys(prefix if prefix is not None else key_prefix())
        self.leases = Leases(client, keys)
        self.ledger = Ledger(client, keys)
        self.specs = Specs(client, keys)
        self.experiments = Experiments(client, keys, self.ledger, self.specs)
        self.results = Results(client, keys, self.specs, self.leases)
        self.attempts = Attempts(client, keys)
        self.health = Health(client, keys)
        self.waves = Waves(client, keys)
        self.run_evidence = Evidence(binary, keys)
        self.bundles = Bundles(client, binary, keys)
        self.workspaces = Workspaces(client, keys)
        self.judgments = Judgments(client, keys)
        self.reports = Reports(client, keys)

    @classmethod
    def from_url(cls, url: str, prefix: str | None = None) -> Store:
        return cls(*connect(url), prefix, url)

    # --- The scheduler's call sites, which move to the classes above next: each of
    # these is the method it returns, and goes with its last caller.

    def create_experiment(
        self,
        info: ExperimentInfo,
        matrix: Matrix,
        specs: Sequence[RunSpec] = (),
        manifest: Manifest | None = None,
    ) -> None:
        return self.experiments.create(info, matrix, specs, manifest)

    def exists(self, exp_id: str) -> bool:
        return self.experiments.exists(exp_id)

    def info(self, exp_id: str) -> ExperimentInfo:
        return self.experiments.info(exp_id)

    def matrix(self, exp_id: str, relocate: Callable[[Path], Path] | None = None) -> Matrix:
        return self.experiments.matrix(exp_id, relocate)

    def set_status(
        self, exp_id: str, status: ExperimentStatus, finished_at: float | None = None
    ) -> None:
        return self.experiments.set_status(exp_id, status, finished_at)

    def status_changes(self, exp_id: str) -> PubSub:
        return self.experiments.status_changes(exp_id)

    def reopen(self, exp_id: str) -> None:
        return self.experiments.reopen(exp_id)

    def mark_sent(self, exp_id: str, default_queue: str) -> None:
        return self.experiments.mark_sent(exp_id, default_queue)

    def sent_to(self, exp_id: str) -> str | None:
        return self.experiments.sent_to(exp_id)

    def note_chord(self, exp_id: str, group_id: str) -> None:
        return self.experiments.note_chord(exp_id, group_id)

    def list_experiments(self) -> list[ExperimentInfo]:
        return self.experiments.all()

    def latest(self) -> str | None:
        return self.experiments.latest()

    def add_specs(self, exp_id: str, specs: Sequence[RunSpec]) -> None:
        return self.specs.add(exp_id, specs)

    def has_run(self, exp_id: str, run_id: str) -> bool:
        return self.specs.has(exp_id, run_id)

    def run_ids_ending(self, suffix: str, recent: int = 100) -> list[str]:
        return self.specs.ids_ending(suffix, recent)

    def run(self, exp_id: str, run_id: str) -> RunResult | None:
        return self.results.get(exp_id, run_id)

    def runs(self, exp_id: str) -> list[RunResult]:
        return self.results.all(exp_id)

    def unrecord(self, exp_id: str, status: RunStatus) -> list[RunSpec]:
        return self.results.unrecord(exp_id, status)

    def deliveries(self, exp_id: str, run_id: str) -> list[Attempt]:
        return self.attempts.of(exp_id, run_id)

    def halted_tiers(self, exp_id: str) -> dict[str, str]:
        return self.health.halted(exp_id)

    def unrecognised_tiers(self, exp_id: str) -> dict[str, str]:
        return self.health.unrecognised(exp_id)

    def evidence(self, exp_id: str, run_id: str) -> RunEvidence | None:
        return self.run_evidence.get(exp_id, run_id)

    def evidence_blob(self, exp_id: str, run_id: str) -> bytes | None:
        return self.run_evidence.blob(exp_id, run_id)

    def all_evidence_blobs(self, exp_id: str) -> dict[str, bytes]:
        return self.run_evidence.blobs(exp_id)

    def save_bundle(self, exp_id: str, bundle: Bundle) -> None:
        return self.bundles.save(exp_id, bundle)

    def archived_runs(self, exp_id: str) -> int:
        return self.workspaces.count(exp_id)

    def report(self, exp_id: str, version: int = 1) -> ExperimentReport | None:
        return self.reports.get(exp_id, version)

    def report_versions(self, exp_id: str) -> list[int]:
        return self.reports.versions(exp_id)

    def new_version(self, exp_id: str) -> int:
        return self.reports.new_version(exp_id)

    def version_run_count(self, exp_id: str, version: int) -> int:
        return self.reports.run_count(exp_id, version)

    def version_runs(self, exp_id: str, version: int) -> list[RunResult]:
        return self.reports.runs(exp_id, version)
