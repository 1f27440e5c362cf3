"""The files an experiment needs, shipped with it so no worker depends on the submitter's paths.

At submit, `collect` reads the matrix folder (`base_dir`, what runs see as
$EVALFLEET_MATRIX_DIR: agent scripts, tools, checks, guidance) and every file or
folder the matrix names outside it (prompt files, rubrics, tier files, skills,
workspace templates, a Dockerfile) into a Bundle: a Manifest (path in the bundle
-> the sha256 of its content, or a symlink's target) and the contents by
digest, bounded by the matrix's `bundle:` limits. The contents go to the
experiment's Redis (core.store.keys, `files`), the manifest beside its matrix.

A worker `materialise`s a manifest once into its cache, under the manifest's
own digest: built in a private temporary folder and renamed into place, so
several worker processes of one machine may race and every one of them sees a
complete folder or none. The stored matrix keeps the submitter's absolute
paths; `Manifest.relocation` maps each to its copy in the materialised folder
(core.matrix applies it to every input path while the matrix is read).

The folder is also what an agent could try to rewrite to move its own number
(worker.confinement): its files are made read-only to everyone but the worker,
the ones evaluation alone reads (`hidden`: a scenario's tests, rubrics, the matrix
file) unreadable to everyone but the worker, and `damaged` tells whether it is
still exactly its manifest (hashes, links, modes, nothing added) before it serves
a run and before a run's gates; `restore` rebuilds a damaged one.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import hashlib
import os
import shutil
import stat
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, field_validator

from core.errors import BundleError
from core.files.places import cache_root, work_root
from core.results.record import Record

# The store reads stored manifests for every command; only collecting a bundle needs
# the matrix's models.
if TYPE_CHECKING:
    from core.matrix import BundleConfig, Matrix

# Bundle paths: the matrix folder under MATRIX, each named path outside it under OUTSIDE.
MATRIX = "matrix"
OUTSIDE = "outside"
MB = 1024 * 1024
# The embedded broker's state folder (fleet.broker), in the folder `scheduler`
# runs in: never shipped, whatever `bundle.exclude` says.
STATE_DIR = ".evalfleet"


class Entry(Record):
    """One path of the bundle: a file (digest), a symlink (link) or else a folder."""

    digest: str | None = Field(None, description="sha256 of a regular file's content")
    link: str | None = Field(None, description="a symlink's target, recreated as a link")
    executable: bool = False


class Manifest(Record):
    root: str | None = Field(None, description="the submitter's matrix folder (base_dir)")
    entries: dict[str, Entry] = Field(default_factory=dict)
    outside: dict[str, str] = Field(
        default_factory=dict,
        description="a path the matrix names outside its folder -> its path in the bundle",
    )
    hidden: list[str] = Field(
        default_factory=list,
        description="bundle paths (files or folders) only the evaluation reads: never an agent",
    )

    @field_validator("entries")
    @classmethod
    def _inside(cls, entries: dict[str, Entry]) -> dict[str, Entry]:
        # A manifest comes from Redis: none of its paths may lead out of the folder
        # it is materialised in.
        for name in entries:
            parts = PurePosixPath(name).parts
            if not parts or name.startswith("/") or ".." in parts or "." in parts:
                raise ValueError(f"bundle path {name!r} is not a plain relative path")
        return entries

    def digest(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()

    def is_hidden(self, name: str) -> bool:
        return any(name == top or name.startswith(f"{top}/") for top in self.hidden)

    def place_of(self, path: Path) -> str | None:
        """The bundle path of a submitter's path (the inverse of `relocation`)."""
        if self.root is not None and path.is_relative_to(self.root):
            relative = path.relative_to(self.root).as_posix()
            return MATRIX if relative == "." else f"{MATRIX}/{relative}"
        return self.outside.get(str(path))

    def digests(self) -> set[str]:
        return {e.digest for e in self.entries.values() if e.digest is not None}

    def relocation(self, folder: Path) -> Callable[[Path], Path]:
        """The submitter's path -> the same file in `folder` (the materialised bundle)."""
        root = Path(self.root) if self.root else None

        def relocate(path: Path) -> Path:
            if root is not None and path.is_relative_to(root):
                return folder / MATRIX / path.relative_to(root)
            moved = self.outside.get(str(path))
            return folder / moved if moved is not None else path

        return relocate


@dataclass
class Bundle:
    manifest: Manifest
    contents: dict[str, bytes] = field(default_factory=dict)  # digest -> bytes

    @property
    def size(self) -> int:
        return sum(len(c) for c in self.contents.values())


# --- submit: collecting --------------------------------------------------------------------


def collect(matrix: Matrix, matrix_file: Path | None = None) -> Bundle:
    """The bundle of `matrix`'s files, within its `bundle:` limits; raises BundleError.
    `matrix_file` (its gates, references, everything an agent could game) is hidden
    with the other paths only evaluation reads (`hidden_paths`)."""
    limits = matrix.bundle
    root = matrix.base_dir
    collector = _Collector(limits, root)
    if root is not None:
        names = excluded_by([*limits.exclude, STATE_DIR])
        # The artifacts folder is the experiments' output, even inside the matrix folder;
        # this machine's run folders and files cache are a worker's, not the project's.
        outputs = {work_root().resolve(), cache_root().resolve()}
        if matrix.artifacts is not None:
            outputs.add(matrix.artifacts.dir)
        collector.add_tree(root, MATRIX, excluded=lambda path: names(path.name) or path in outputs)
    for path in sorted(set(named_paths(matrix)) - {root}):
        if root is not None and path.is_relative_to(root):
            # Named explicitly: shipped whole even where an exclude pattern matches.
            collector.add(path, f"{MATRIX}/{path.relative_to(root).as_posix()}")
        else:
            place = f"{OUTSIDE}/{hashlib.sha256(str(path).encode()).hexdigest()[:16]}/{path.name}"
            collector.add(path, place)
            collector.manifest.outside[str(path)] = place
    hidden = [*hidden_paths(matrix), *([matrix_file.resolve()] if matrix_file else [])]
    manifest = collector.manifest
    places = (manifest.place_of(path) for path in hidden)
    manifest.hidden = sorted({p for p in places if p is not None and p in manifest.entries})
    return collector.bundle()


def hidden_paths(matrix: Matrix) -> Iterator[Path]:
    """The paths only evaluation reads: scenarios' `tests:`, `solution:` and verifier
    runner, and the judges' rubrics."""
    for scenario in matrix.scenarios:
        yield from (p for p in (scenario.tests, scenario.solution) if p is not None)
        if scenario.verifier is not None and scenario.verifier.runner is not None:
            yield scenario.verifier.runner  # beside the tests at /tests: as hidden as they
        judge = scenario.evaluation.judge
        if judge is not None:
            yield judge.rubric


def named_paths(value: Any) -> Iterator[Path]:
    """Every input path a matrix (or any part of one) holds, however deep."""
    from core.matrix import Artifacts

    if isinstance(value, Path):
        yield value
    elif isinstance(value, Artifacts):  # an output folder all machines share, not an input
        return
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from named_paths(getattr(value, name))
    elif isinstance(value, dict):
        for item in value.values():
            yield from named_paths(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from named_paths(item)


class _Collector:
    def __init__(self, limits: BundleConfig, root: Path | None):
        self.limits = limits
        self.root = root
        self.manifest = Manifest(root=str(root) if root is not None else None)
        self.contents: dict[str, bytes] = {}
        self.sizes: dict[str, tuple[int, Path]] = {}  # digest -> size, a file with it
        self.total = 0

    def add_tree(self, top: Path, place: str, excluded: Callable[[Path], bool]) -> None:
        self._entry(top, place)
        if not top.is_dir() or top.is_symlink():
            return
        for folder, dirs, files in os.walk(top, onerror=_unreadable):
            relative = Path(folder).relative_to(top)
            for name in sorted(dirs):
                if excluded(Path(folder) / name):
                    dirs.remove(name)
            for name in sorted(dirs) + sorted(files):
                if excluded(Path(folder) / name):
                    continue
                # A symlinked folder is listed here and kept as a link (os.walk
                # does not follow it).
                self._entry(Path(folder) / name, f"{place}/{(relative / name).as_posix()}")

    def add(self, path: Path, place: str) -> None:
        self.add_tree(path, place, excluded=lambda path: False)

    def _entry(self, path: Path, place: str) -> None:
        if place in self.manifest.entries:
            return
        try:
            info = path.lstat()
        except FileNotFoundError:
            raise BundleError(f"{path}: gone since the matrix was read") from None
        except OSError as exc:
            raise BundleError(f"{path}: cannot be read ({exc.strerror})") from None
        if len(self.manifest.entries) >= self.limits.max_files:
            raise BundleError(
                f"{path}: the experiment ships more than {self.limits.max_files} files and "
                f"folders to its workers (bundle.max_files). Exclude what runs do not need "
                "with `bundle.exclude`, set `base_dir` to a smaller folder, or raise "
                "`bundle.max_files` in the matrix"
            )
        if stat.S_ISLNK(info.st_mode):
            self.manifest.entries[place] = Entry(link=self._link_target(path))
        elif stat.S_ISDIR(info.st_mode):
            self.manifest.entries[place] = Entry()
        elif stat.S_ISREG(info.st_mode):
            self.manifest.entries[place] = Entry(
                digest=self._content(path, info.st_size),
                executable=bool(info.st_mode & stat.S_IXUSR),
            )
        # Pipes, sockets and devices are no files to ship (opening a pipe would wait).

    def _link_target(self, path: Path) -> str:
        target = os.readlink(path)
        # An absolute link into the matrix folder points at the submitter's copy:
        # made relative, it points at the worker's.
        inside = self.root is not None and Path(target).is_relative_to(self.root)
        if os.path.isabs(target) and inside:
            return os.path.relpath(target, path.parent)
        return target

    def _content(self, path: Path, size: int) -> str:
        limit = int(self.limits.max_file_mb * MB)
        if size > limit:
            raise BundleError(
                f"{path}: {size / MB:.1f} MB, more than one file the experiment ships to its "
                f"workers may be (bundle.max_file_mb: {self.limits.max_file_mb:g}). Raise "
                "`bundle.max_file_mb` in the matrix, or exclude the file with `bundle.exclude` "
                "if no run needs it"
            )
        try:
            with path.open("rb") as handle:
                data = handle.read(limit + 1)
        except OSError as exc:
            raise BundleError(f"{path}: cannot be read ({exc.strerror})") from None
        if len(data) > limit:  # grew since lstat
            raise BundleError(f"{path}: grew past bundle.max_file_mb while it was read")
        digest = hashlib.sha256(data).hexdigest()
        if digest not in self.contents:
            self.contents[digest] = data
            self.sizes[digest] = (len(data), path)
            self.total += len(data)
            self._check_total()
        return digest

    def _check_total(self) -> None:
        if self.total <= self.limits.max_mb * MB:
            return
        largest = sorted(self.sizes.values(), key=lambda item: -item[0])[:3]
        named = ", ".join(f"{path} ({size / MB:.1f} MB)" for size, path in largest)
        raise BundleError(
            f"the files the experiment ships to its workers take more than "
            f"bundle.max_mb ({self.limits.max_mb:g} MB); the largest: {named}. Exclude what "
            "runs do not need with `bundle.exclude`, set `base_dir` to a smaller folder, or "
            "raise `bundle.max_mb` in the matrix"
        )

    def bundle(self) -> Bundle:
        return Bundle(self.manifest, self.contents)


# --- worker: materialising --------------------------------------------------------------------

Fetch = Callable[[list[str]], dict[str, bytes]]  # digests -> their contents
FETCH_BATCH = 100


# A copy no process used for this long goes when another is built: a copy in use is
# marked at least hourly (`in_use`), and no run lasts a week. Without it every edit of
# a matrix folder left a copy of it in the cache for good.
STALE_S = 7 * 24 * 3600
_MARK_EVERY_S = 3600
_marked: dict[Path, float] = {}


def materialise(manifest: Manifest, fetch: Fetch, cache: Path) -> Path:
    """The folder holding `manifest`'s files in `cache`, built on first use (then the
    copies no process used for STALE_S are deleted)."""
    final = cache / manifest.digest()
    if final.is_dir():
        in_use(final)
        return final
    # Traversable by a run's own user (worker.confinement), writable by the worker alone.
    cache.mkdir(mode=0o755, parents=True, exist_ok=True)
    building = _beside(final, "building")
    try:
        _build(manifest, fetch, building)
        try:
            os.rename(building, final)
        except OSError:
            if not final.is_dir():  # not a lost race: a real failure
                raise
    finally:
        _delete(building)
    _marked[final] = time.time()
    _sweep(cache, time.time() - STALE_S)
    return final


def in_use(folder: Path) -> None:
    """`folder`, a copy in the cache, marked as used now (its mtime; at most hourly in a
    process), so that no sweep takes it."""
    now = time.time()
    if now - _marked.get(folder, 0.0) < _MARK_EVERY_S:
        return
    with contextlib.suppress(OSError):
        os.utime(folder)
    _marked[folder] = now


def _sweep(cache: Path, before: float) -> None:
    """The copies in `cache` last used before `before` deleted, and what a build or a
    sweep that died left. Each is first renamed out of the way, so that no process
    finds half of one; one marked meanwhile is put back."""
    try:
        with os.scandir(cache) as entries:
            old = [e.name for e in entries if e.is_dir(follow_symlinks=False) and _older(e, before)]
    except OSError:  # no cache yet
        return
    for name in old:
        away = _beside(cache / name, "sweeping")
        try:
            os.rename(cache / name, away)
        except OSError:  # another process's sweep took it
            continue
        if not name.startswith(".") and away.stat().st_mtime >= before and _put_back(away, name):
            continue
        _delete(away)


def _put_back(away: Path, name: str) -> bool:
    """A copy marked in use as it was swept, back under its name (False: a new copy was
    built there meanwhile, and this one can go)."""
    try:
        os.rename(away, away.with_name(name))
    except OSError:
        return False
    return True


def _older(entry: os.DirEntry[str], before: float) -> bool:
    try:
        return entry.stat(follow_symlinks=False).st_mtime < before
    except OSError:
        return False


def _build(manifest: Manifest, fetch: Fetch, folder: Path) -> None:
    folder.mkdir()
    entries = sorted(manifest.entries.items())
    for name, entry in entries:
        if entry.digest is None and entry.link is None:
            (folder / name).mkdir(parents=True, exist_ok=True)
    files = [(name, entry) for name, entry in entries if entry.digest is not None]
    for batch in _batches(files, FETCH_BATCH):
        contents = fetch(sorted({e.digest for _, e in batch if e.digest is not None}))
        for name, entry in batch:
            assert entry.digest is not None
            data = contents.get(entry.digest)
            if data is None or hashlib.sha256(data).hexdigest() != entry.digest:
                raise BundleError(f"the experiment's file {name} is missing or damaged in Redis")
            target = folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    # Links last: a link never stands where a later entry is written through it
    # (symlink refuses a path that exists).
    for name, entry in entries:
        if entry.link is not None:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(entry.link, folder / name)
    # Modes last, deepest first: a folder made read-only is still filled above.
    for name, entry in reversed(entries):
        if entry.link is None:
            (folder / name).chmod(_mode(manifest, name, entry))
    folder.chmod(0o755)


def _mode(manifest: Manifest, name: str, entry: Entry) -> int:
    """Read-only to all but the worker, unreadable to all but it when hidden; the
    worker's own write bit is kept off too, so a slip of its own shows as damage."""
    runnable = entry.digest is None or entry.executable
    mode = 0o555 if runnable else 0o444
    return mode & 0o500 if manifest.is_hidden(name) else mode


# --- worker: checking ------------------------------------------------------------------------

# (inode, mode, size, ctime) of each path: any write, chmod, rename or replacement
# changes one of them, and ctime cannot be set back by a process.
Signature = tuple[int, int, int, int]
# Per process: the folders whose contents were last found whole, with their
# signatures then; a folder whose signatures are unchanged need not be hashed again.
_WHOLE: dict[Path, dict[str, Signature]] = {}


def damaged(manifest: Manifest, folder: Path) -> str | None:
    """The first bundle path of `folder` that is not as `manifest` says (changed,
    gone, of another kind or mode, or added), else None. Hashes the files the first
    time in this process and after any change; otherwise compares inodes and times."""
    signatures = _signatures(folder)
    if _WHOLE.get(folder) == signatures:
        return None
    problem = _differs(manifest, folder, signatures)
    if problem is None:
        _WHOLE[folder] = signatures
    else:
        _WHOLE.pop(folder, None)
    return problem


def restore(manifest: Manifest, fetch: Fetch, cache: Path) -> Path:
    """`manifest`'s folder built anew beside the damaged one, then put in its place in
    one step, the damaged one deleted after: the other runs of the machine reading
    the folder meanwhile find the one or the other, never none (they once failed on a
    folder gone for the time a rebuild took)."""
    final = cache / manifest.digest()
    fresh, aside = _beside(final, "building"), _beside(final, "damaged")
    try:
        _build(manifest, fetch, fresh)
        if not _exchanged(fresh, final):  # no damaged copy left, or no renameat2 here
            with contextlib.suppress(FileNotFoundError):
                os.rename(final, aside)
            try:
                os.rename(fresh, final)
            except OSError:
                if not final.is_dir():  # not another process's restore, done first
                    raise
    finally:
        for leftover in (fresh, aside):  # after an exchange, `fresh` is the damaged copy
            _delete(leftover)
    _WHOLE.pop(final, None)
    _marked[final] = time.time()
    return final


_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


@functools.cache
def _renameat2() -> Any:
    """glibc's renameat2, None where there is none; looked up at a restore's first use
    (ctypes is a few ms of a submit's start, which never restores)."""
    import ctypes

    return getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)


def _exchanged(one: Path, other: Path) -> bool:
    """`one` and `other` swapped in one step (Linux's renameat2); False where that
    cannot be done (either is missing, or the call is not there)."""
    call = _renameat2()
    if call is None:
        return False
    done = call(_AT_FDCWD, os.fsencode(one), _AT_FDCWD, os.fsencode(other), _RENAME_EXCHANGE)
    return int(done) == 0


def _signatures(folder: Path) -> dict[str, Signature]:
    """Each path under `folder`, relative and with `/`, and its signature (every run
    reads it, twice: scandir's entries and names joined as strings, no os.walk)."""
    found: dict[str, Signature] = {}
    pending = [(str(folder), "")]
    while pending:
        top, prefix = pending.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:  # gone or replaced meanwhile: _differs says so
            continue
        for entry in entries:
            relative = prefix + entry.name
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # deleted meanwhile: _differs says so
                continue
            found[relative] = (info.st_ino, info.st_mode, info.st_size, info.st_ctime_ns)
            if stat.S_ISDIR(info.st_mode):
                pending.append((entry.path, relative + "/"))
    return found


def _differs(manifest: Manifest, folder: Path, signatures: dict[str, Signature]) -> str | None:
    """The most telling difference: a file's content (what moves a grade) before a mode."""
    parents = {str(parent) for name in manifest.entries for parent in PurePosixPath(name).parents}
    added = sorted(set(signatures) - set(manifest.entries) - parents)
    if added:
        return f"{added[0]} (added)"
    modes = []
    for name, entry in sorted(manifest.entries.items()):
        path = folder / name
        try:
            info = path.lstat()
        except OSError:
            return f"{name} (gone)"
        if entry.link is not None:
            if not stat.S_ISLNK(info.st_mode) or os.readlink(path) != entry.link:
                return name
            continue
        if entry.digest is None:
            if not stat.S_ISDIR(info.st_mode):
                return name
        elif not stat.S_ISREG(info.st_mode) or _sha256(path) != entry.digest:
            return name
        if stat.S_IMODE(info.st_mode) != _mode(manifest, name, entry):
            modes.append(f"{name} (mode changed)")
    return modes[0] if modes else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(MB):
            digest.update(chunk)
    return digest.hexdigest()


def _beside(final: Path, what: str) -> Path:
    """A hidden name in `final`'s folder for a copy on its way (`building`) or out
    (`damaged`, `sweeping`), none other's: what a sweep takes once it is old."""
    return final.with_name(f".{what}-{final.name[:16]}-{uuid.uuid4().hex[:8]}")


def _delete(folder: Path) -> None:
    """A copy deleted, if it is there: its read-only folders made writable first (their
    entries cannot be deleted otherwise, even by their owner)."""
    if not folder.exists():
        return
    for top, dirs, _ in os.walk(folder):
        for name in dirs:
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(top, name), 0o700, follow_symlinks=False)
    with contextlib.suppress(OSError):
        folder.chmod(0o700)
    shutil.rmtree(folder, ignore_errors=True)


def _unreadable(error: OSError) -> None:
    # A folder left out silently would be missing on every worker.
    raise BundleError(f"{error.filename}: cannot be read ({error.strerror})")


def _batches(items: list[Any], size: int) -> Iterable[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def excluded_by(patterns: Iterable[str]) -> Callable[[str], bool]:
    """A file or folder name matched by any of the glob `patterns`."""
    wanted = list(patterns)
    return lambda name: any(fnmatch.fnmatchcase(name, pattern) for pattern in wanted)
