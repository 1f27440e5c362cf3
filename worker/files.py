"""The experiment's files on this worker: its matrix, with every path leading to this
machine's copy of the files shipped with it (core.files.bundle).

The copy lives in the worker's cache (EVALFLEET_CACHE_DIR; by default beside the
work folder, named after it plus `-files`, so the work folder keeps only run
folders), one folder per manifest digest, built once and shared by the worker
processes of the machine. An experiment submitted before files travelled keeps
the submitter's paths.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from core.files.bundle import materialise
from core.matrix import Matrix
from core.store import Store
from worker.workspace import work_root


def cache_root() -> Path:
    configured = os.environ.get("EVALFLEET_CACHE_DIR")
    if configured:
        return Path(configured)
    root = work_root()
    return root.with_name(f"{root.name}-files")


def local_matrix(store: Store, exp_id: str) -> Matrix:
    """The experiment's matrix as runs on this machine use it: read and validated once
    per process, its files fetched once per machine (again if the cache was cleaned)."""
    matrix, folder = _prepared(store, exp_id)
    if folder is not None and not folder.is_dir():
        _prepared.cache_clear()
        matrix, folder = _prepared(store, exp_id)
    return matrix


@functools.lru_cache(maxsize=32)
def _prepared(store: Store, exp_id: str) -> tuple[Matrix, Path | None]:
    manifest = store.bundles.manifest(exp_id)
    if manifest is None:
        return store.experiments.matrix(exp_id), None
    folder = materialise(
        manifest, lambda digests: store.bundles.files(exp_id, digests), cache_root()
    )
    return store.experiments.matrix(exp_id, relocate=manifest.relocation(folder)), folder
