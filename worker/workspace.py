"""A delivery's private folder: the workspace the agent works in, plus its prompt and events.

Layout: ``<root>/<delivery>/workspace`` (template copy + tier files, the agent's
cwd), ``<root>/<delivery>/prompt.txt`` and ``<root>/<delivery>/events.jsonl``
beside it, so the files evalfleet hands the agent are not part of what the
gates and judge inspect.

Every delivery of a run has a folder of its own: two deliveries of one run can
overlap on one machine (a pool process killed while the run's lapsed lease sends
it again, a worker frozen past its lease, a resume), and neither may prepare,
judge or delete the other's workspace. The folder is named by the run id,
percent-encoded (so `a_b:c` and `a:b_c` stay apart), plus a random token. Beside
it, ``<delivery>.lock`` is locked (flock) by the process running the delivery
for as long as it runs; the kernel drops the lock when that process dies, however
it dies. A lock that nobody holds is therefore a dead delivery's:
`clear_dead_deliveries` stops what it left running and deletes its folder. A
finished delivery deletes its lock file, so a folder kept on purpose
(`keep_workspaces`) is never taken for a dead one's.

A pool process hands its finished delivery's folder, emptied and still locked, to
its next delivery, which renames it (`put_away`, `prepare`): the folder, its lock
file, its prompt and the graders' sitecustomize are then made and deleted once per
process, not once per run.
Only those, which are root's and which the run's own user could not change, are
handed on; what was that user's is made anew for every run.

Nothing here reads or writes outside the run's folder: a template's symlinks
are copied as links (never followed), tier files are refused when their
destination resolves outside the workspace, and removal deletes only a real
folder directly under the work root.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import functools
import os
import shutil
import stat
import subprocess
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from core.errors import SetupError
from core.evaluation.credentials import RunAs
from core.evaluation.evaluate import AgentOutput
from core.evaluation.shell import HeadTail, Watch, kill_groups_by_env, run_shell
from core.files.places import work_root
from core.files.tree import walk
from core.matrix import AgentConfig, AgentPreset, Scenario, Tier
from core.results.transcript import AgentOutcome
from worker import graders_site

# In the environment of everything a delivery starts (agent, setup, gates), with
# the delivery's folder name: what it left running is found by it.
MARKER = "EVALFLEET_DELIVERY"


# Its paths are each made once (cached_property): a run asks for them dozens of times.
@dataclass(frozen=True)
class RunDir:
    root: Path
    lock: int | None = field(default=None, compare=False)  # the held lock's descriptor

    @property
    def marker(self) -> str:
        return self.root.name

    @functools.cached_property
    def lock_file(self) -> Path:
        return self.root.with_name(f"{self.root.name}.lock")

    @functools.cached_property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @functools.cached_property
    def prompt_file(self) -> Path:
        return self.root / "prompt.txt"

    @functools.cached_property
    def git_config(self) -> Path:
        """The run's default git identity, as git's system config (`git_identity`)."""
        return self.root / "gitconfig"

    @functools.cached_property
    def handed(self) -> tuple[Path, Path]:
        """The files the run is handed, root's and only readable by its user, which a
        pool process's next run takes over with the folder (`put_away`)."""
        return (self.prompt_file, self.git_config)

    @functools.cached_property
    def events_file(self) -> Path:
        return self.root / "events.jsonl"

    @functools.cached_property
    def graders_home(self) -> Path:
        """The gates' and the verifier's home, made once the agent has ended (with_tests)."""
        return self.root / "graders"

    @functools.cached_property
    def graders_python(self) -> Path:
        """The graders' sitecustomize's folder (worker.graders_site): root's, beside their
        home rather than in it, where a gate running the agent's code could swap it."""
        return self.root / "graders-python"

    @functools.cached_property
    def tests(self) -> Path:
        """A scenario's hidden tests, copied in once the agent has ended (with_tests)."""
        return self.root / "tests"

    @functools.cached_property
    def solution(self) -> Path:
        """A task's solution, copied in for the oracle only (with_solution)."""
        return self.root / "solution"

    @functools.cached_property
    def logs(self) -> Path:
        """A task's /logs: `agent/` the agent's to write, `verifier/` its verifier's
        rewards (core.evaluation.verifier)."""
        return self.root / "logs"

    @functools.cached_property
    def home(self) -> Path:
        """A preset CLI's home, beside the workspace: its state is not the agent's work."""
        return self.root / "home"

    def events(self, max_bytes: int) -> HeadTail | None:
        """The events file the agent wrote, bounded as its stdout is (`max_bytes`, the
        agent's max_transcript_bytes: the first and last halves, the middle cut and
        counted) and read no further: a sparse file of gigabytes, which uses no disk
        and so passes the workspace's limit, costs the worker nothing. None when the
        agent left none, or left something else than a file in its place
        (`_open_regular`)."""
        file = _open_regular(self.events_file)
        if file is None:
            return None
        kept = HeadTail(max_bytes)
        with file:
            size = os.fstat(file.fileno()).st_size
            kept.add(file.read(min(size, kept.half)))
            if size > 2 * kept.half:
                file.seek(size - kept.half)
                kept.dropped = size - 2 * kept.half
            kept.add(file.read(kept.half))
        return kept

    def agent_output(self, outcome: AgentOutcome, agent: AgentConfig) -> AgentOutput:
        """What the run's agent left, for its evaluation: its outcome, its events file
        (bounded: `events`) and its CLI's session record."""
        events = self.events(agent.max_transcript_bytes)
        return AgentOutput(
            outcome,
            None if events is None else events.text(),
            self.session_text(agent.preset_spec),
            events_cut=0 if events is None else events.dropped,
        )

    def session_text(self, preset: AgentPreset | None) -> str | None:
        """The session record a preset's CLI left in its home, its files in name order;
        None when it keeps none or left none. Only its figures are read from it."""
        if preset is None or preset.session_files is None:
            return None
        texts = []
        for path in sorted(self.home.glob(preset.session_files)):
            file = _open_regular(path)
            if file is not None:
                with file:
                    texts.append(file.read(_SESSION_BYTES).decode("utf-8", "replace"))
        return "\n".join(texts) or None

    def remove(self) -> None:
        # Only ever delete a real folder directly under the work root, whatever
        # the agent turned the folder into (a symlink to another run's folder is
        # unlinked, not followed). A name of folder_name's never climbs (no `/`, `.`
        # or `..`), so its place is read from the path as written.
        if self.root.is_symlink():
            self.root.unlink()
        elif self.root.parent == work_root() and self.root.name not in ("", ".", ".."):
            remove_tree(self.root, ignore_errors=True)

    def discard(self) -> None:
        """The folder deleted (`remove`), then its lock file and its lock (`release`)."""
        self.remove()
        self.release()

    def release(self) -> None:
        """The delivery is over: its lock file goes, then its lock."""
        with contextlib.suppress(FileNotFoundError):
            self.lock_file.unlink()
        if self.lock is not None:
            os.close(self.lock)


def _open_regular(path: Path) -> BinaryIO | None:
    """`path` open for reading if it is a file of its own; None where there is none, or
    the agent put a link, a FIFO or a device in its place. The worker reads as root:
    a link would have it read a file the run's user may not (and keep it as evidence),
    a FIFO would block it, a device (/dev/zero) never end; none is what a CLI writes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


# A CLI's session file read for its figures: a run's own, but not without bound.
_SESSION_BYTES = 16 * 1024 * 1024

_XDG = {
    "XDG_CONFIG_HOME": ".config",
    "XDG_DATA_HOME": ".local/share",
    "XDG_STATE_HOME": ".local/state",
    "XDG_CACHE_HOME": ".cache",
}


def own_home(run_dir: RunDir, preset: AgentPreset | None) -> dict[str, str]:
    """A home of the run's own for its agent, its XDG folders and its TMPDIR inside,
    with a preset's `home_files` written: the variables that point the agent there.
    Whatever an agent keeps (logins, settings, sessions, caches, temporary files)
    stays with the run and goes with it. The home must not be under TMPDIR: Codex
    then refuses to make its sandbox helper, and every command it runs fails.

    The XDG folders are made for a preset's CLI only: an agent of the matrix's own
    makes one when it first writes there, as the XDG spec asks of every program.
    Made and removed for every run, five folders were a tenth of a quick run's time
    (ext4 journals each mkdir and rmdir)."""
    env = {"HOME": str(run_dir.home), "TMPDIR": str(run_dir.home / ".tmp")}
    run_dir.home.mkdir(parents=True, exist_ok=True)
    (run_dir.home / ".tmp").mkdir(exist_ok=True)
    for name, folder in _XDG.items():
        if preset is not None:
            (run_dir.home / folder).mkdir(parents=True, exist_ok=True)
        env[name] = str(run_dir.home / folder)
    for relative, text in (preset.home_files if preset is not None else {}).items():
        target = run_dir.home / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return env


_PLAIN = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-")


def folder_name(run_id: str) -> str:
    """A new delivery's folder: distinct runs never share a name (each byte but
    letters, digits, `.` and `-` written `_XX`, which is one-to-one and leaves no
    `+`), nor do two deliveries of one run (48 random bits; two that drew the same
    would wait for each other's lock, not share). No `%` and no `:`: OpenCode 1.18
    URL-decodes its working directory's path and then works in one that does not
    exist."""
    name = "".join(chr(b) if b in _PLAIN else f"_{b:02X}" for b in run_id.encode())
    return f"{name}+{uuid.uuid4().hex[:12]}"


def prepare(run_id: str, tier: Tier, scenario: Scenario, prompt: str) -> RunDir:
    """Make this delivery's folder, locked until `release`: template copy, tier
    files, prompt. Raises SetupError."""
    base = work_root()
    base.mkdir(parents=True, exist_ok=True)
    spread_out(str(base))
    root = base / folder_name(run_id)
    run_dir = _reuse(root)
    if run_dir is None:
        run_dir = RunDir(root, lock=_lock(RunDir(root).lock_file))
        run_dir.root.mkdir()
    try:
        _fill(run_dir, tier, scenario, prompt)
    except BaseException:
        run_dir.discard()
        raise
    return run_dir


# ext2/3/4's inode flags (linux/fs.h): read and set with these ioctls, the flag that
# marks the top of unrelated directory trees.
_GET_FLAGS, _SET_FLAGS, _TOPDIR = 0x80086601, 0x40086602, 0x00020000


@functools.cache
def spread_out(folder: str) -> bool:
    """The run folders made in `folder` are spread over the disk (ext4's Orlov allocator,
    `chattr +T`), as the unrelated trees they are; True once `folder` is so marked.
    A run's folder is seven inodes, and on an ext4 without a journal every new inode
    is searched past those freed in its block group in the last minutes: with the run
    folders all in the work folder's group, that search was a twentieth of a fleet's
    CPU on quick runs (before a pool process handed its folder on: `put_away`).
    Elsewhere (tmpfs, another filesystem) nothing changes. Once per folder and
    process."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        flags = array.array("i", [0])
        fcntl.ioctl(fd, _GET_FLAGS, flags)
        if not flags[0] & _TOPDIR:
            fcntl.ioctl(fd, _SET_FLAGS, array.array("i", [flags[0] | _TOPDIR]))
        return True
    except OSError:  # not a filesystem with these flags, or not ours to mark
        return False
    finally:
        os.close(fd)


def _fill(run_dir: RunDir, tier: Tier, scenario: Scenario, prompt: str) -> None:
    try:
        if scenario.workspace is not None:
            shutil.copytree(scenario.workspace, run_dir.workspace, symlinks=True)
            # The template is read-only in the experiment's files (core.files.bundle);
            # its copy is the run's to change.
            _add_mode(run_dir.workspace, 0o200)
        else:
            run_dir.workspace.mkdir()
        for dest, source in tier.files.items():
            target = _inside(run_dir.workspace, dest)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            _keep_runnable(source, target)
        _write_in_place(run_dir.prompt_file, prompt.encode())
        # A spare's prompt keeps its inode, and the access time the last agent's read
        # set (at a moment of its choosing) would reach this run: both times set anew.
        os.utime(run_dir.prompt_file)
        if scenario.environment is not None:
            for folder in ("agent", "verifier"):
                (run_dir.logs / folder).mkdir(parents=True)
    except OSError as exc:
        raise SetupError(f"preparing the workspace failed: {exc}") from exc


def _keep_runnable(source: Path, target: Path) -> None:
    """A tier's file that is a program (`files: {agent.sh: agent.sh}`, run as
    `./agent.sh`) stays one in the workspace, as a template's files do: copyfile makes
    every file plain (each run: "Permission denied", exit 126). Its shipped copy is
    read-only; the workspace's is the run's to change, as it always was."""
    runnable = source.stat().st_mode & 0o111
    if runnable:
        target.chmod(stat.S_IMODE(target.stat().st_mode) | runnable)


# Slot users have no passwd entry, and a run's home no git config: git refused every
# commit ("unable to auto-detect name"). This is git's system config for the run's
# commands (GIT_CONFIG_SYSTEM), so every other config comes before it: the machine's
# own (included after ours, so its values win), the run's global one (`git config
# --global`, in the run's home) and the repository's. `EMAIL`, which git takes only
# where no config names an email, keeps its place: the email is left out then.
_GIT_NAME = b"[user]\n\tname = evalfleet agent\n"
_GIT_EMAIL = b"\temail = agent@evalfleet.invalid\n"
_GIT_MACHINE = b"[include]\n\tpath = /etc/gitconfig\n"

# Variables that choose git's system config: where a run or an image sets one, it is kept.
GIT_SYSTEM_CONFIG = frozenset({"GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM"})


def git_identity(run_dir: RunDir, env: Mapping[str, str]) -> dict[str, str]:
    """The run's default git identity written in its folder (where a spare's is written
    over, its times set anew as its prompt's), and the variable naming it, unless `env`,
    the run's environment, chose git's system config itself. Written whatever `env`
    says: a container mounts it (worker.docker_sandbox), and decides on its own."""
    email = b"" if "EMAIL" in env else _GIT_EMAIL
    _write_in_place(run_dir.git_config, _GIT_NAME + email + _GIT_MACHINE)
    os.utime(run_dir.git_config)
    if GIT_SYSTEM_CONFIG & env.keys():
        return {}
    return {"GIT_CONFIG_SYSTEM": str(run_dir.git_config)}


def _write_in_place(path: Path, data: bytes) -> None:
    """`path` holds `data`, written over a spare's file rather than truncated first:
    on a disk mounted with `discard`, freeing a file's block sends a discard, and a
    truncating write took 185 us where this takes 10 (the same inode either way)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        written = 0
        while written < len(data):
            written += os.pwrite(fd, data[written:], written)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def _add_mode(top: Path, bits: int) -> None:
    """`bits` added to the mode of `top` and everything under it (links left alone)."""
    top.chmod(top.stat().st_mode | bits)
    for folder, dirs, files in walk(top):
        for name in (*dirs, *files):
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, os.lstat(path).st_mode | bits)


def chown_tree(top: Path, user: RunAs) -> None:
    """`top` and everything under it made `user`'s (links themselves, not followed)."""
    if not top.exists():
        return
    os.chown(top, user.uid, user.gid, follow_symlinks=False)
    for folder, dirs, files in walk(top):
        for name in (*dirs, *files):
            os.chown(os.path.join(folder, name), user.uid, user.gid, follow_symlinks=False)


def take_back(run_dir: RunDir) -> None:
    """A kept folder (`keep_workspaces`) closed to everyone but the worker's user: the
    run's uid is leased again by later runs, which could otherwise read and change
    the evidence kept for a person to look at. Closed, not taken over: a chown of
    what is inside would make root the owner of a file the agent hard-linked there
    from a shared folder (and keep it out of its owner's sweep)."""
    run_dir.root.chmod(0o700)


def locked(root: Path) -> RunDir:
    """A RunDir of the folder `root` (made beforehand, in the work folder), its lock held
    by this process: should the process die, the next `clear_dead_deliveries` deletes
    the folder, as a delivery's."""
    return RunDir(root, lock=_lock(RunDir(root).lock_file))


def _lock(lock_file: Path) -> int:
    """Lock `lock_file` (created if need be) for this process; returns the descriptor."""
    while True:
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o600)  # not inherited by children
        fcntl.flock(fd, fcntl.LOCK_EX)
        # A delivery clearing dead ones may have locked the fresh file first, taken
        # it for a dead one's and deleted it: only a file still in place counts.
        if _in_place(fd, lock_file):
            return fd
        os.close(fd)


def _in_place(fd: int, path: Path) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


# Each pool process's spare folder (worker.prefork turns this on in pool processes):
# the last delivery's, emptied but for its prompt, still locked and renamed
# `spare-PID-TOKEN` (a name no delivery's folder has: those hold a `+`), renamed again
# for the next delivery the process prepares. On ext4, each of the seven inodes a run's
# folder had (the folder, its lock file, prompt, events file, workspace, home and
# TMPDIR) made and freed for every run was about 2 % of a quick run's time
# (docs/BENCHMARKS.md).
_SPARE = "spare-"
_spares: dict[int, RunDir] = {}  # by pid: a forked process starts with none
_keeping = False


def keep_spares(keep: bool) -> None:
    """Whether deliveries of this process leave their folder for the next (`put_away`);
    turned off, the one kept is deleted."""
    global _keeping
    _keeping = keep
    if not keep:
        _drop_spare()


def _drop_spare() -> None:
    spare = _spares.pop(os.getpid(), None)
    if spare is not None:
        spare.discard()


def put_away(run_dir: RunDir, own_user: bool) -> None:
    """The delivery is over, its processes ended: its folder deleted and its lock released
    (`remove`, `release`), or, where this process keeps a spare, everything in the
    folder deleted but its prompt, its git config, the graders' sitecustomize and the
    folder kept, locked, for `prepare`. Only the folder of an agent that ran as a user
    of its own (`own_user`) is kept, and of it only what is root's, which that user could
    not change (its mode, attributes, contents; a read sets a file's access time, which
    the next run sets again): what was the user's (workspace, home, events file) could
    carry a run's marks to the next (an ACL, a timestamp, an ext4 generation number),
    so it is made anew. An agent that ran as the worker's user owned all of it."""
    if not (_keeping and own_user) or run_dir.lock is None:
        run_dir.discard()
        return
    handed_on = {path.name for path in (*run_dir.handed, run_dir.graders_python)}
    try:
        with os.scandir(run_dir.root) as entries:
            for entry in entries:
                if entry.name not in handed_on or entry.is_symlink():
                    _delete(entry.path, entry.is_dir(follow_symlinks=False))
    except OSError:
        run_dir.discard()
        return
    _drop_spare()  # one a process
    # Under a name of its own meanwhile: no folder of the run is left once it ended.
    name = f"{_SPARE}{os.getpid()}-{uuid.uuid4().hex[:12]}"
    spare = _moved(run_dir, run_dir.root.with_name(name))
    if spare is not None:
        _spares[os.getpid()] = spare


def _delete(path: str, folder: bool) -> None:
    if folder:
        remove_tree(path)
    else:
        os.unlink(path)


def remove_tree(
    path: str | Path, *, ignore_errors: bool = False, dir_fd: int | None = None
) -> None:
    """`path` (relative to the folder open as `dir_fd`, if given) and all it holds gone,
    links not followed. Python's rmtree recurses once a level: a tree an agent nested
    deeper than that (3,000 folders) goes by coreutils' `rm`, which does not (a
    RecursionError there once failed every later run on the work folder: each met the
    dead run's folder it could not delete). Given `dir_fd`, `rm` gets the folder by its
    own copy of that descriptor, which no rename meanwhile can move."""
    try:
        shutil.rmtree(path, ignore_errors=ignore_errors, dir_fd=dir_fd)
    except RecursionError:
        target = str(path) if dir_fd is None else f"/proc/self/fd/{dir_fd}/{path}"
        done = subprocess.run(
            ["rm", "-rf", "--one-file-system", "--", target],
            pass_fds=() if dir_fd is None else (dir_fd,),
            capture_output=True,
            text=True,
        )
        if done.returncode != 0 and not ignore_errors:
            raise OSError(f"rm -rf {path}: {done.stderr.strip()}") from None


def _reuse(root: Path) -> RunDir | None:
    """This process's spare folder renamed `root`, its lock file with it and still
    locked; None when there is none (or it was lost: then it is deleted)."""
    spare = _spares.pop(os.getpid(), None)
    return None if spare is None else _moved(spare, root)


def _moved(run_dir: RunDir, root: Path) -> RunDir | None:
    """`run_dir` renamed `root`, its lock file with it and still locked; None when that
    failed (then both are deleted and the lock released)."""
    moved = RunDir(root, lock=run_dir.lock)
    try:
        # The lock file first: a folder without one is nobody's to clear meanwhile.
        os.rename(run_dir.lock_file, moved.lock_file)
        os.rename(run_dir.root, moved.root)
    except OSError:
        RunDir(root).discard()  # whichever part got there (the lock is closed once, below)
        run_dir.discard()
        return None
    return moved


def clear_dead_deliveries() -> list[str]:
    """Deliveries on this machine whose process died (a SIGKILLed pool process, a
    killed worker) without cleaning up: every process group carrying their marker
    is killed and their folder deleted. Live deliveries, even frozen or superseded
    ones, hold their lock and are left alone. Returns the dead deliveries' names."""
    base = work_root()
    cleared = []
    for lock_file in base.glob("*.lock") if base.is_dir() else ():
        try:
            fd = os.open(lock_file, os.O_RDWR)
        except FileNotFoundError:  # finished meanwhile
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not _in_place(fd, lock_file):  # another delivery cleared it meanwhile
                continue
            dead = RunDir(lock_file.with_suffix(""))
            kill_groups_by_env(MARKER, dead.marker)
            dead.discard()
            if not dead.marker.startswith(_SPARE):  # a spare is no delivery: it ran nothing
                cleared.append(dead.marker)
        except BlockingIOError:  # alive
            continue
        finally:
            os.close(fd)
    return cleared


def _inside(workspace: Path, dest: str) -> Path:
    """The tier file's destination; refused when a template symlink leads it outside."""
    target = workspace / dest
    root = workspace.resolve()
    if not target.resolve().is_relative_to(root):
        raise SetupError(
            f"tier file destination {dest!r} leads outside the workspace (through a symlink "
            "in the scenario's template); refused"
        )
    return target


def size_limit(workspace: Path, max_mb: float | None) -> Watch | None:
    """A watch that stops the agent once its workspace takes more than `max_mb` on disk."""
    if max_mb is None:
        return None
    limit = int(max_mb * 1024 * 1024)

    def over_limit() -> str | None:
        if disk_usage(workspace, stop_above=limit) > limit:
            return f"its workspace grew past {max_mb:g} MB (agent.max_workspace_mb)"
        return None

    return over_limit


def disk_usage(root: Path, stop_above: int) -> int:
    """Bytes allocated under `root` (symlinks not followed); counting ends past `stop_above`."""
    total = 0
    for folder, dirs, files in walk(root):
        for name in (*dirs, *files):
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except OSError:  # deleted meanwhile
                continue
            if total > stop_above:
                return total
    return total


def run_setup(
    run_dir: RunDir, scenario: Scenario, env: Mapping[str, str], user: RunAs | None = None
) -> None:
    for command in scenario.setup:
        result = run_shell(
            command, run_dir.workspace, timeout_s=scenario.setup_timeout_s, env=env, user=user
        )
        if not result.ok:
            # What it said on stderr, else on stdout (`make` and many tools), else nothing:
            # "exit code 1", not "exit code 1: ".
            said = (result.stderr.strip() or result.stdout.strip())[-500:]
            why = (
                f"timed out after {scenario.setup_timeout_s:g} s"
                if result.timed_out
                else result.error or f"exit code {result.exit_code}" + (f": {said}" if said else "")
            )
            raise SetupError(f"setup command {command!r} failed: {why}")


def with_tests(
    run_dir: RunDir, scenario: Scenario, env: Mapping[str, str], user: RunAs | None
) -> dict[str, str]:
    """The gates' environment: the agent's, but for a home of their own made now that
    the agent has ended (the agent's, which it wrote, would steer what they run: a
    usercustomize.py in its Python user site runs first in every `python3` they start,
    and a git, curl or npm config in it is read), Python's user site off; and where the
    scenario's hidden tests are ($EVALFLEET_TESTS), copied in now (confined, nothing of
    its user is left running to read them). Their Python is the graders' (its user site
    off, and worker.graders_site: nothing the agent left in the workspace is imported
    before the module a gate means). Raises SetupError."""
    env = {**env, **_graders_home(run_dir, user, env)}
    if scenario.tests is None:
        return env
    # Terminal-Bench's runner lies beside its tests, at the task's root: /tests holds both.
    runner = scenario.verifier.runner if scenario.verifier is not None else None
    _copy_in(scenario.tests, run_dir.tests, user, "tests", extra=runner)
    return {**env, "EVALFLEET_TESTS": str(run_dir.tests)}


# The graders' Python, in a task's container too: `python3 -m pytest` run in the
# workspace would put it first on sys.path (a pytest.py the agent left there would be
# the one run), and its user site is the agent's. Python 3.11+ reads PYTHONSAFEPATH;
# on the worker graders_site covers an older one.
SAFE_PYTHON = {"PYTHONSAFEPATH": "1", "PYTHONNOUSERSITE": "1"}


def _graders_home(run_dir: RunDir, user: RunAs | None, env: Mapping[str, str]) -> dict[str, str]:
    """A fresh home in the run's folder (root's: the run's user cannot make it first),
    the gates' HOME, TMPDIR and XDG folders, and their Python's settings (PYTHONPATH:
    the graders' sitecustomize before `env`'s own). One folder: each costs a quick run
    time."""
    home, site = run_dir.graders_home, run_dir.graders_python
    fresh = user is None or not _kept(site)
    try:
        for made in (home, site) if fresh else (home,):
            if made.exists():  # a preflight's second cell in the same folder
                remove_tree(made)
            made.mkdir()
        if fresh:
            site.chmod(0o755)  # whatever the umask: the run's user reads it, writes nothing
            # Whole or not at all: a file cut short (a full disk) would be kept.
            part = site / ".sitecustomize.py.part"
            part.write_bytes(_graders_site())
            part.chmod(0o644)
            part.replace(site / "sitecustomize.py")
        else:  # as the spare's prompt: no time the last run's gates left is the next's
            os.utime(site / "sitecustomize.py")
        if user is not None:
            os.chown(home, user.uid, user.gid)
    except OSError as exc:
        raise SetupError(f"making the gates' home failed: {exc}") from exc
    given, in_workspace = graders_python_path(env.get("PYTHONPATH", ""), run_dir.workspace)
    return {
        "HOME": str(home),
        "TMPDIR": str(home),
        **SAFE_PYTHON,
        "PYTHONPATH": os.pathsep.join([str(site), *given]),
        graders_site.PLACES_ENV: os.pathsep.join(in_workspace),
    } | {name: str(home / folder) for name, folder in _XDG.items()}


def _kept(site: Path) -> bool:
    """Whether `site` holds the graders' sitecustomize as this process wrote it, handed on
    from its last delivery (put_away): this process's own, open to no one else's writes,
    whole. Asked only where the agent ran as a user of its own, which cannot write in the
    run's folder; an agent run as the worker's user could have made it first."""
    try:
        folder, file = os.lstat(site), os.lstat(site / "sitecustomize.py")
    except OSError:
        return False
    return (
        all(info.st_uid == os.geteuid() and not info.st_mode & 0o022 for info in (folder, file))
        and (stat.S_ISDIR(folder.st_mode) and stat.S_ISREG(file.st_mode))
        and (file.st_size == len(_graders_site()))
    )


def graders_python_path(python_path: str, workspace: Path) -> tuple[list[str], list[str]]:
    """A matrix's PYTHONPATH for the gates, split: the folders outside the workspace,
    and those in it (`src`, `.`), which graders_site's finder looks in last. On the
    path itself the agent's files there would be imported first, and Python runs the
    .pth files of every entry before any sitecustomize."""
    outside, inside = [], []
    root = workspace.resolve()
    for entry in python_path.split(os.pathsep):
        if not entry:
            continue
        folder = (workspace / entry).resolve()
        if folder == root or root in folder.parents:
            inside.append(str(folder))
        else:
            outside.append(str(folder))
    return outside, inside


@functools.cache
def _graders_site() -> bytes:
    return Path(graders_site.__file__).read_bytes()


def with_solution(run_dir: RunDir, scenario: Scenario | None, user: RunAs | None) -> None:
    """The task's solution in the run, for the oracle (and only it) to run. Raises
    SetupError."""
    if scenario is None or scenario.solution is None or scenario.environment is None:
        name = repr(scenario.id) if scenario is not None else "(none)"
        raise SetupError(
            f"the oracle runs a benchmark task's solution in its environment, and scenario "
            f"{name} has no `solution:` (a folder with solve.sh) or no `environment:`"
        )
    _copy_in(scenario.solution, run_dir.solution, user, "solution")


# Where a solution given as one script (Terminal-Bench's solution.sh) goes in /solution.
SOLVE = "solve.sh"


def _copy_in(
    source: Path, dest: Path, user: RunAs | None, what: str, extra: Path | None = None
) -> None:
    """`source` (a folder, or one script that becomes solve.sh) at `dest`, with `extra`
    beside its files, the run's user's to read."""
    try:
        # `dest` may exist, empty: under docker the container's /tests is bound to it
        # from the start (worker.docker_sandbox).
        if source.is_dir():
            shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True)
        else:
            dest.mkdir(exist_ok=True)
            shutil.copyfile(source, dest / SOLVE)
        if extra is not None:
            shutil.copyfile(extra, dest / extra.name)
        _add_mode(dest, 0o644)  # hidden in the experiment's files: plain here
        # Its folders passable too: a container's user is not the one copying them in.
        for folder, _, _ in walk(dest):
            os.chmod(folder, os.stat(folder).st_mode | 0o111)
        if user is not None:
            chown_tree(dest, user)
    except OSError as exc:
        raise SetupError(f"copying the scenario's {what} into the run failed: {exc}") from exc


def fresh_rewards(run_dir: RunDir, user: RunAs | None) -> Path:
    """The folder the verifier writes its rewards in (/logs/verifier), made anew: what
    the agent left there (a reward.txt of its own, a link elsewhere) is not its verdict."""
    folder = run_dir.logs / "verifier"
    try:
        if folder.is_symlink() or folder.is_file():
            folder.unlink()
        elif folder.is_dir():
            remove_tree(folder)
        run_dir.logs.mkdir(exist_ok=True)
        folder.mkdir()
        if user is not None:
            chown_tree(folder, user)
    except OSError as exc:
        raise SetupError(f"preparing {folder} for the verifier failed: {exc}") from exc
    return folder
