"""The experiment's reports: version 1 (the runs' own) at ``exp:{id}:report``, each
later one (rejudge, rescore) in ``exp:{id}:reports`` by version, with its runs'
results in ``exp:{id}:v{N}:runs``; the record's ``versions`` counts the versions
after the first.

A later version's number is taken atomically (HINCRBY) and its report and each
of its results are written once (HSETNX), so a redelivered task cannot change
what a follower already read; version 1 is written again by a resume.
"""

from __future__ import annotations

from core.errors import ExperimentNotFound
from core.results.report import ExperimentReport
from core.results.run import RunResult
from core.store import scripts
from core.store.client import TextClient
from core.store.keys import Keys
from core.store.results import parse_results


class Reports:
    def __init__(self, client: TextClient, keys: Keys):
        self.redis = client
        self.keys = keys
        self._save = client.register_script(scripts.SAVE_REPORT)

    def save(self, report: ExperimentReport) -> None:
        """Version 1 (the runs' own report) may be written again (resume); a later
        version is written once. ExperimentNotFound once the experiment has no record
        (deleted meanwhile)."""
        exp_id = report.experiment.id
        keys = [self.keys.experiment(exp_id), self.keys.report(exp_id), self.keys.reports(exp_id)]
        if self._save(keys=keys, args=[report.version, report.model_dump_json()]) == "gone":
            raise ExperimentNotFound(exp_id)

    def get(self, exp_id: str, version: int = 1) -> ExperimentReport | None:
        if version == 1:
            raw = self.redis.get(self.keys.report(exp_id))
        else:
            raw = self.redis.hget(self.keys.reports(exp_id), version)
        return ExperimentReport.model_validate_json(raw) if raw else None

    def versions(self, exp_id: str) -> list[int]:
        """The versions whose report is stored, oldest first."""
        later = sorted(int(v) for v in self.redis.hkeys(self.keys.reports(exp_id)))
        return [1, *later] if self.redis.exists(self.keys.report(exp_id)) else later

    def current(self, exp_id: str, versions: list[int] | None = None) -> int | None:
        """The version a report shows by default: the latest, but for those a resume has
        superseded since (made of runs before it ran some again: Experiments.reopen),
        then version 1. None when there is none yet. `versions`: `versions(exp_id)`,
        when the caller has read them."""
        versions = self.versions(exp_id) if versions is None else versions
        superseded = 1 + int(self.redis.hget(self.keys.experiment(exp_id), "superseded") or 0)
        current = [v for v in versions if v == 1 or v > superseded]
        return current[-1] if current else None

    def new_version(self, exp_id: str) -> int:
        """The number of the experiment's next report version (2, 3, ...), taken atomically."""
        return 1 + int(self.redis.hincrby(self.keys.experiment(exp_id), "versions", 1))

    def save_run(self, version: int, result: RunResult) -> bool:
        """A run's result in a later version; False when it has one there already."""
        key = self.keys.version_runs(result.experiment_id, version)
        return bool(self.redis.hsetnx(key, result.run_id, result.model_dump_json()))

    def run(self, exp_id: str, version: int, run_id: str) -> RunResult | None:
        raw = self.redis.hget(self.keys.version_runs(exp_id, version), run_id)
        return RunResult.model_validate_json(raw) if raw else None

    def run_count(self, exp_id: str, version: int) -> int:
        return int(self.redis.hlen(self.keys.version_runs(exp_id, version)))

    def runs(self, exp_id: str, version: int) -> list[RunResult]:
        """The version's results, by tier, scenario and index."""
        return parse_results(self.redis.hvals(self.keys.version_runs(exp_id, version)))
