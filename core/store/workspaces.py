"""The runs' archived workspaces: ``exp:{id}:workspaces``, run id -> an
ArchivedWorkspace JSON (the matrix's ``workspace_archive:``), what a rescore runs
the gates on. Written once per run, after its result.
"""

from __future__ import annotations

from core.errors import ExperimentNotFound
from core.files.archive import ArchivedWorkspace
from core.store import scripts
from core.store.client import TextClient
from core.store.keys import Keys


class Workspaces:
    def __init__(self, client: TextClient, keys: Keys):
        self.redis = client
        self.keys = keys
        self._set = client.register_script(scripts.SET_IF_RECORDED)

    def save(self, exp_id: str, run_id: str, archive: ArchivedWorkspace) -> None:
        """ExperimentNotFound when the experiment has no record (deleted meanwhile)."""
        keys = [self.keys.workspaces(exp_id), self.keys.experiment(exp_id)]
        if self._set(keys=keys, args=[run_id, archive.model_dump_json()]) == "gone":
            raise ExperimentNotFound(exp_id)

    def get(self, exp_id: str, run_id: str) -> ArchivedWorkspace | None:
        raw = self.redis.hget(self.keys.workspaces(exp_id), run_id)
        return ArchivedWorkspace.model_validate_json(raw) if raw else None

    def count(self, exp_id: str) -> int:
        return int(self.redis.hlen(self.keys.workspaces(exp_id)))

    def run_ids(self, exp_id: str) -> set[str]:
        """The runs that have an archived workspace."""
        return set(self.redis.hkeys(self.keys.workspaces(exp_id)))
