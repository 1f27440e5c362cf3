"""The experiment's files on this worker: its matrix, with every path leading to this
machine's copy of the files shipped with it (core.files.bundle).

The copy lives in the worker's cache (core.files.places), one folder per manifest
digest, built once and shared by the worker
processes of the machine. An experiment submitted before files travelled keeps
the submitter's paths.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path

from core.files.bundle import (
    MATRIX,
    Bundle,
    Fetch,
    Manifest,
    damaged,
    in_use,
    materialise,
    restore,
)
from core.files.places import cache_root
from core.matrix import Matrix
from core.store import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalFiles:
    """An experiment's matrix on this machine, and the folder of its files (None for
    an experiment submitted before files travelled)."""

    matrix: Matrix
    manifest: Manifest | None
    folder: Path | None
    fetch: Fetch

    def damaged(self) -> str | None:
        """The first of the experiment's files that is no longer as shipped, as the
        matrix folder names it (`check.sh`), else None."""
        if self.manifest is None or self.folder is None:
            return None
        problem = damaged(self.manifest, self.folder)
        if problem is None:
            return None
        if problem.startswith(f"{MATRIX} "):  # the folder itself
            return f"$EVALFLEET_MATRIX_DIR{problem.removeprefix(MATRIX)}"
        return problem.removeprefix(f"{MATRIX}/")

    def repaired(self) -> str | None:
        """What `damaged` says, the folder restored when it says anything (for the gates
        and for every other run of the machine)."""
        problem = self.damaged()
        if problem is not None:
            self.restore()
        return problem

    def hidden_paths(self) -> list[Path]:
        """The folder's paths no agent may read (core.files.bundle, `hidden`)."""
        if self.manifest is None or self.folder is None:
            return []
        return [self.folder / name for name in self.manifest.hidden]

    def submitted_from(self) -> list[Path]:
        """The submitter's own matrix folder and the files it named outside it, where
        they are on this machine (an embedded run, a worker beside the submitter): the
        matrix, its rubrics, references and tests as they were written, readable to
        every user unless the submitter closed them. `sandbox: bwrap` masks them."""
        if self.manifest is None:
            return []
        named = [*([self.manifest.root] if self.manifest.root else []), *self.manifest.outside]
        return [path for path in map(Path, named) if path != Path("/") and path.exists()]

    def restore(self) -> None:
        if self.manifest is not None:
            restore(self.manifest, self.fetch, cache_root())


def local_files(store: Store, exp_id: str) -> LocalFiles:
    """The experiment's files as runs on this machine use them: the matrix read and
    validated once per process, its files fetched once per machine (again if the
    cache was cleaned) and checked against their hashes each time a run is to use
    them: a folder a run outside any sandbox changed is rebuilt before it serves
    another run or experiment."""
    files = _prepared(store, exp_id)
    if files.folder is not None and not files.folder.is_dir():
        _prepared.cache_clear()
        files = _prepared(store, exp_id)
    if files.folder is not None:
        in_use(files.folder)  # no sweep of the cache takes it while its runs run
    if (problem := files.repaired()) is not None:
        log.warning("the files of %s were changed on this worker (%s): restored", exp_id, problem)
    return files


def staged(matrix: Matrix, bundle: Bundle) -> LocalFiles:
    """A matrix not yet submitted, with its files as a worker of this machine would
    have them (`scheduler preflight`): its bundle built in the cache, the matrix's
    paths leading there. The submitter's own folder may be one a run's user cannot
    enter (root's home), and there every file would be readable to the agent."""

    def fetch(digests: list[str]) -> dict[str, bytes]:
        return {digest: bundle.contents[digest] for digest in digests}

    folder = materialise(bundle.manifest, fetch, cache_root())
    relocated = Matrix.submitted(matrix.model_dump(mode="json"), bundle.manifest.relocation(folder))
    return LocalFiles(relocated, bundle.manifest, folder, fetch)


def local_matrix(store: Store, exp_id: str) -> Matrix:
    return local_files(store, exp_id).matrix


@functools.lru_cache(maxsize=32)
def _prepared(store: Store, exp_id: str) -> LocalFiles:
    manifest = store.bundles.manifest(exp_id)

    def fetch(digests: list[str]) -> dict[str, bytes]:
        return store.bundles.files(exp_id, digests)

    if manifest is None:
        return LocalFiles(store.experiments.matrix(exp_id), None, None, fetch)
    folder = materialise(manifest, fetch, cache_root())
    matrix = store.experiments.matrix(exp_id, relocate=manifest.relocation(folder))
    return LocalFiles(matrix, manifest, folder, fetch)
