"""`sandbox: bwrap`: a command agent (and a benchmark task's verifier) inside bubblewrap.

The jail's root is a fresh tmpfs holding the host's top-level folders read-only
(its top-level links recreated), so the jail can hold folders of its own where a
task expects them: the workspace at the task's `workdir` (/app) besides its own
path, the run's logs at /logs, and for one command each the tests at /tests (the
verifier) or the solution at /solution (the oracle). It has a private /tmp and
/dev, its own PID, IPC and UTS namespaces, and only its workspace, its logs, its
events file and its own home writable, its prompt file readable. The worker's home
(but for the software its PATH finds there), the work folder (other deliveries),
the cache of experiments' files (others' hidden tests), the experiment's hidden
files (worker.confinement) and the submitter's own matrix folder where it is on this
machine (an embedded run: its matrix, rubrics and tests as written) are masked.
bwrap dies with its parent, and the run's process-group kill reaches the jail too.
A worker running as root starts bwrap as the run's own uid (worker.confinement), so
even a way out of the namespaces leaves it unprivileged.

The network is a fresh namespace with only loopback, unless the run needs more
(`network=True`, worker.run decides): an agent CLI must reach its model.

bubblewrap comes from the distribution (`apt-get install bubblewrap`); it needs
unprivileged user namespaces or root. A worker without it records the run as an
infrastructure error rather than running the agent unconfined.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from core.errors import SetupError
from core.files.places import cache_root, work_root
from worker.workspace import RunDir

# Top-level folders the jail makes its own rather than taking the host's.
_OWN_TOP = ("proc", "dev", "tmp")


# wide: the jail's parts, each its own keyword that the callers that have it name
def bwrap_argv(
    run_dir: RunDir,
    files: Path | None,
    hidden: Sequence[Path] = (),
    *,
    workdir: str | None = None,
    network: bool = False,
    binds: Mapping[str, Path] | None = None,
    away: Sequence[Path] = (),
) -> list[str]:
    """The argv prefix that runs `bash -c COMMAND` in the sandbox; raises SetupError.
    `files`: the experiment's folder (worker.files), shown read-only wherever it is;
    `hidden`: its paths masked. `workdir`: a task's (core.matrix.task), where the
    workspace is shown too and the command starts, with the run's logs at /logs.
    `binds`: more of the run's folders, by the path they are shown at (/tests).
    `away`: the submitter's own folder and files, masked (_away_masked)."""
    binary = shutil.which("bwrap")
    if binary is None:
        raise SetupError(
            "the agent runs under `sandbox: bwrap` (what `auto` means for a benchmark "
            "task) but this worker has no bwrap; install bubblewrap (apt-get install "
            "bubblewrap), or choose `sandbox: docker`"
        )
    workspace, events = str(run_dir.workspace), str(run_dir.events_file)
    run_dir.events_file.touch()  # a bind mount needs the file to exist
    # The agent's own home (worker.workspace.own_home) is its to write.
    home = ["--bind", str(run_dir.home), str(run_dir.home)] if run_dir.home.is_dir() else []
    # The files it is handed, read-only: its prompt and its git identity.
    handed = [str(f) for f in run_dir.handed if f.is_file()]
    handed_binds = [arg for path in handed for arg in ("--ro-bind", path, path)]
    shown = ["--ro-bind", str(files), str(files)] if files is not None else []
    cache = cache_root()
    masks = []
    for path in hidden:
        if path.is_dir():
            masks += ["--tmpfs", str(path)]
        elif path.exists():
            masks += ["--ro-bind", "/dev/null", str(path)]
    task: list[str] = []
    if workdir is not None:
        task = ["--bind", workspace, workdir, "--bind", str(run_dir.logs), "/logs"]
    for at, folder in (binds or {}).items():
        task += ["--bind", str(folder), at]
    # A host's own /app (or /tests) would hide the run's: those are left out of the root.
    tops = [*(binds or {}), *([workdir, "/logs"] if workdir else [])]
    mounted = {at.strip("/") for at in tops if "/" not in at.strip("/")}
    return [
        binary,
        *_host_root(skip=mounted),
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
        # The submitter's folder before the home: a home within it is masked again on
        # top, with its software shown.
        *_away_masked(away),
        *_home_masked(),
        # The work folder (other runs) and the cache of experiments' files (other
        # experiments' hidden tests, readable by a worker's own user) masked; the
        # experiment's and the run's own files show through them wherever they are.
        "--tmpfs", str(work_root()),
        *(["--tmpfs", str(cache)] if cache.is_dir() else []),
        *shown,
        *masks,
        "--bind", workspace, workspace,
        "--bind", events, events,
        *handed_binds,
        *home,
        *task,
        "--unshare-all",
        *(["--share-net"] if network else []),
        "--die-with-parent",
        "--chdir", workdir or workspace,
    ]  # fmt: skip


def _host_root(skip: set[str]) -> list[str]:
    """The host's top-level entries, read-only, on the jail's tmpfs root: not `/` itself,
    which would leave no room for a task's /app, /tests and /logs. Links (`/bin ->
    usr/bin`) are made again as links; the jail's own folders and `skip` are left out."""
    argv: list[str] = []
    with os.scandir("/") as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name in _OWN_TOP or entry.name in skip:
                continue
            path = f"/{entry.name}"
            if entry.is_symlink():
                argv += ["--symlink", os.readlink(path), path]
            else:
                argv += ["--ro-bind", path, path]
    return argv


def _home_masked() -> list[str]:
    """The worker's home masked (its user's keys and credentials, a clone of the
    benchmark with its solutions: a jail run as that user could read them all), but for
    the software its PATH finds there and the worker's Python, read-only (_software).
    Nothing for a worker running as root whose home the run's uid cannot reach anyway."""
    home = Path(os.path.expanduser("~")).resolve()
    as_root = os.geteuid() == 0
    if home == Path("/") or not home.is_dir() or (as_root and not _passable(home.parents)):
        return []
    places = {*os.environ.get("PATH", "").split(os.pathsep), sys.prefix, sys.base_prefix}
    shown: set[Path] = set()
    for place in places:
        if not os.path.isabs(place):  # `.` or empty: the worker's folder, not software
            continue
        path = Path(place).resolve()
        if home in path.parents and path.is_dir():
            shown |= _software(path, home)
    # bwrap run as the run's uid (a worker running as root) binds only what it reaches.
    shown = {p for p in shown if not as_root or _open_to_all(p, home)}
    # A folder within another already shown needs no bind of its own.
    tops = sorted(p for p in shown if not any(other in p.parents for other in shown))
    return ["--tmpfs", str(home), *[arg for p in tops for arg in ("--ro-bind", str(p), str(p))]]


def _away_masked(away: Sequence[Path]) -> list[str]:
    """The submitter's matrix folder and the files it named outside it, masked where they
    are on this machine: the matrix (its gates, its references), the rubrics and the
    tests as written, which the experiment's copy hides and the submitter's folder, of
    the usual modes, shows to every user. The software the worker's PATH finds there
    (a project's .venv) and the worker's Python are shown again, read-only. The work
    folder, the cache and the run's own files, bound after, show through. Nothing for
    a path a worker running as root starts the jail unable to reach (its run's uid
    could not read it anyway)."""
    as_root = os.geteuid() == 0
    argv: list[str] = []
    places = {*os.environ.get("PATH", "").split(os.pathsep), sys.prefix, sys.base_prefix}
    for path in (p.resolve() for p in away):
        if path == Path("/") or (as_root and not _passable(path.parents)):
            continue
        if not path.is_dir():
            argv += ["--ro-bind", "/dev/null", str(path)]
            continue
        shown = {
            found
            for place in places
            if os.path.isabs(place)
            and (found := Path(place).resolve()).is_dir()
            and (found == path or path in found.parents)
            and (not as_root or _open_to_all(found, path))
        }
        if path in shown:
            continue  # the worker's own software: the folder stays as it is
        tops = sorted(p for p in shown if not any(other in p.parents for other in shown))
        argv += ["--tmpfs", str(path), *[a for p in tops for a in ("--ro-bind", str(p), str(p))]]
    return argv


def _software(folder: Path, home: Path) -> set[Path]:
    """What the jail shows for `folder`, a PATH entry (or a Python) in the home: the
    prefix of a bin/ (`~/.nvm/versions/node/v22`, where the package's files are), but
    for a prefix right in the home (`~/.local`, `~/.cargo`: its credentials and
    histories beside the programs) the bin/ itself and where its links lead."""
    prefix = _prefix(folder, home)
    if prefix is not None:
        return {prefix}
    shown = {folder}
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            target = Path(entry.path).resolve()
            if entry.is_symlink() and home in target.parent.parents:
                shown.add(_prefix(target.parent, home) or target.parent)
    return shown


def _prefix(folder: Path, home: Path) -> Path | None:
    """The prefix `folder` belongs to (its parent for a bin/), unless that is the home or
    right in it."""
    prefix = folder.parent if folder.name == "bin" else folder
    return prefix if home in prefix.parent.parents else None


def _passable(folders: Iterable[Path]) -> bool:
    """Whether any user may pass through each of `folders`."""
    try:
        return all(os.stat(folder).st_mode & 0o001 for folder in folders)
    except OSError:
        return False


def _open_to_all(path: Path, home: Path) -> bool:
    """Whether any user may enter `path` and every folder down to it from `home`."""
    try:
        return all(
            os.stat(folder).st_mode & 0o005 == 0o005
            for folder in (path, *[p for p in path.parents if p == home or home in p.parents])
        )
    except OSError:
        return False
