"""The experiment's files on this worker: its matrix, with every path leading to this
machine's copy of the files shipped with it (core/bundle.py).

The copy lives in the worker's cache (EVALFLEET_CACHE_DIR, default `.files` in
the work folder), one folder per manifest digest, built once and shared by the
worker processes of the machine; an experiment submitted before files travelled
keeps the submitter's paths.
"""

from __future__ import annotations

import os
from pathlib import Path

from core.bundle import materialise
from core.config import Matrix
from core.store import Store
from worker.workspace import work_root


def cache_root() -> Path:
    return Path(os.environ.get("EVALFLEET_CACHE_DIR") or work_root() / ".files")


def local_matrix(store: Store, exp_id: str) -> Matrix:
    """The experiment's matrix as runs on this machine use it."""
    manifest = store.manifest(exp_id)
    if manifest is None:
        return store.matrix(exp_id)
    folder = materialise(manifest, lambda digests: store.files(exp_id, digests), cache_root())
    return store.matrix(exp_id, relocate=manifest.relocation(folder))
