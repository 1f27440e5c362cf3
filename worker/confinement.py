"""How a run's agent is kept from what it must not reach (README, "Isolation").

The agent under test is an adversary: whatever it can reach it may use to move its
own number. `sandbox: auto`, the default, means:

- on a worker running as root (a CI container, the compose fleet): a **user of the
  run's own**. Setup, agent and command gates run as an unprivileged uid leased
  for the delivery (one per concurrent delivery of the machine, never shared), in a
  workspace and home it owns. The experiment's files (worker.files) are root's and
  read-only to it, the ones evaluation keeps hidden (tests, solutions, rubrics, the
  matrix file) unreadable; other processes' /proc environ, memory and files are not
  its to read; every process of the uid is killed when the agent ends, so nothing
  of it waits for the hidden tests to arrive. The network is the host's: the model
  endpoint is reached as it is, and evalfleet's store needs a password no file or
  process of the agent's shows (the embedded broker listens on a private socket).
- elsewhere: unconfined, as `sandbox: none`; `validate` says so, the experiment's
  files are still verified by their hashes before the gates (a change is the run's
  `tampered` failure).
- for a benchmark task (a scenario with an `environment`): `bwrap`, whose jail
  holds the task's /app, /tests and /logs (worker.sandbox); no host folder can.
  `sandbox: docker` holds them too, in the task's own image (worker.docker_sandbox).

Under `bwrap` a worker running as root leases the run's own user too, and starts
the jail as it: the two together, as `user` and as `bwrap` each say.

The uids carry no passwd entry: HOME is the run's own (worker.workspace.own_home),
which is all the agent CLIs look up.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.errors import SetupError
from core.evaluation.credentials import SUPPORTED, RunAs, own_ipc
from core.files.places import work_root
from core.matrix import AgentConfig, Scenario, TaskEnvironment
from core.results.run import Isolation
from worker.leftovers import clear_leftovers
from worker.sandbox import bwrap_argv
from worker.workspace import RunDir, chown_tree, with_solution

# Far above any system's users and the usual subordinate-id ranges (100000 + 65536 n),
# in blocks of UID_SLOTS. The last block ends below 2**31: bubblewrap, like other tools
# that hold a uid in a signed int, refuses one above ("setting up uid map: Invalid
# argument"), though the kernel takes uids up to 2**32 - 2.
UID_BASE = 1_500_000_000
UID_SLOTS = 4096
UID_BLOCKS = (2**31 - UID_BASE) // UID_SLOTS
RUN_UIDS = range(UID_BASE, UID_BASE + UID_BLOCKS * UID_SLOTS)


def isolation(agent: AgentConfig, is_root: bool | None = None, task: bool = False) -> Isolation:
    """What `agent.sandbox` means on this machine (a worker running as root or not)
    for a scenario that is a benchmark task (`task`) or not."""
    if agent.sandbox != "auto":
        return agent.sandbox
    if task:
        return "bwrap"
    root = os.geteuid() == 0 if is_root is None else is_root
    return "user" if root and SUPPORTED else "none"


def can_lease_users() -> bool:
    """Whether this worker can run commands as a run user of their own (`slot_user`)."""
    return os.geteuid() == 0 and SUPPORTED


@dataclass(frozen=True)
class Confinement:
    """A delivery's confinement: its isolation, the user it runs as (`user`), the
    experiment's folder (`files`) and the paths of it the agent must not see
    (`hidden`: masked under bwrap, unreadable to `user`). Under bwrap: a task's
    `workdir` (worker.sandbox), whether the jail has the host's network, and the
    submitter's own folder and files on this machine (`away`), masked."""

    isolation: Isolation
    user: RunAs | None = None
    files: Path | None = None
    hidden: tuple[Path, ...] = ()
    workdir: str | None = None
    network: bool = False
    away: tuple[Path, ...] = ()

    def end_agent(self) -> None:
        """The agent's time is over: nothing of its user outlives it (before the hidden
        files are copied in for the gates)."""
        if self.user is not None:
            self.user.kill_all()

    def argv_prefix(self, run_dir: RunDir, binds: Mapping[str, Path] | None = None) -> list[str]:
        """What goes before `bash -c COMMAND` to run it confined: the jail's argv under
        bwrap (with `binds`, worker.sandbox), else nothing. Raises SetupError."""
        if self.isolation != "bwrap":
            return []
        return bwrap_argv(
            run_dir,
            self.files,
            self.hidden,
            workdir=self.workdir,
            network=self.network,
            binds=binds,
            away=self.away,
        )


def needs_network(agent: AgentConfig, environment: TaskEnvironment | None) -> bool:
    """Whether a bwrap jail keeps the host's network. An agent CLI calls its model (a
    provider, a gateway, or the scripted server on loopback, which a namespace of its
    own would not share): without the network it retries until its timeout and makes
    no request. A task may allow the internet. A plain command agent, the oracle and
    a verifier otherwise get loopback only."""
    calls_model = agent.preset_spec is not None and agent.preset_spec.calls_model
    return calls_model or (environment is not None and environment.allow_internet)


@contextlib.contextmanager
def confined(
    agent: AgentConfig,
    run_dir: RunDir,
    files: Path | None = None,
    hidden: Sequence[Path] = (),
    scenario: Scenario | None = None,
    away: Sequence[Path] = (),
) -> Iterator[Confinement]:
    """The delivery's confinement while the block runs (a user leased under `user`, and
    under `bwrap` on a root worker), with the task's solution in the run for an agent
    that runs it (the oracle). A benchmark task's environment only a jail holds:
    raises SetupError for a sandbox without one. `away`: the submitter's own folder and
    files on this machine (worker.files.submitted_from), which a jail masks."""
    environment = scenario.environment if scenario is not None else None
    kind = isolation(agent, task=environment is not None)
    if environment is not None and kind not in ("bwrap", "docker"):
        raise SetupError(
            f"a benchmark task runs in its environment (its workdir, /tests, /logs), which "
            f"`sandbox: {agent.sandbox}` does not provide here; use `sandbox: bwrap` (or "
            "`auto`), or `docker`"
        )
    if scenario is not None and scenario.has_image and kind != "docker":
        # On this system its tests would judge another system than theirs: a sound task
        # failed its own oracle, counted against the agent.
        raise SetupError(
            "this benchmark task runs in its own image (`environment.image` or a Dockerfile "
            f"to build), which `sandbox: {agent.sandbox}` does not give it; set `sandbox: "
            "docker` on the agent"
        )
    workdir = environment.workdir if environment is not None else None
    network = needs_network(agent, environment)
    leased = kind == "user" or (kind == "bwrap" and os.geteuid() == 0)
    runs_solution = agent.preset_spec is not None and agent.preset_spec.runs_solution
    if not leased:
        if runs_solution:
            with_solution(run_dir, scenario, None)
        yield Confinement(kind, None, files, tuple(hidden), workdir, network, tuple(away))
        return
    if os.geteuid() != 0:
        raise SetupError(
            "the agent asks for `sandbox: user` but this worker does not run as root, "
            "which a user of the run's own needs; run the worker as root or choose "
            "`sandbox: bwrap`"
        )
    if not SUPPORTED:
        raise SetupError(
            "the agent asks for a user of the run's own, which evalfleet switches to on "
            "Linux on x86_64, aarch64 or riscv64 only; choose `sandbox: bwrap` or `none`"
        )
    for folder in (work_root(), *([files] if files is not None else [])):
        _reachable(folder)
    with run_user(run_dir) as user:
        if runs_solution:
            with_solution(run_dir, scenario, user)
        yield Confinement(kind, user, files, tuple(hidden), workdir, network, tuple(away))


def _reachable(folder: Path) -> None:
    """Every folder above `folder` lets other users pass (its agent reaches its files by
    their paths); raises SetupError naming the one that does not, rather than
    loosening a folder the worker was given."""
    for above in folder.parents:
        if above.exists() and not above.stat().st_mode & 0o001:
            raise SetupError(
                f"{above} (mode {above.stat().st_mode & 0o777:o}) keeps the run's own user "
                f"from reaching {folder}: `chmod o+x {above}`, or set EVALFLEET_WORKDIR "
                "(and EVALFLEET_CACHE_DIR) to a folder under one others may pass, such as /tmp"
            )


def users_root() -> Path:
    """Where the uids' leases are held: one folder for the whole machine, whatever work
    folder each worker has, so two workers never lease one uid (and never kill each
    other's agents when their runs end)."""
    run = Path("/run")
    return (run if os.access(run, os.W_OK) else Path(tempfile.gettempdir())) / "evalfleet-users"


@contextlib.contextmanager
def run_user(run_dir: RunDir) -> Iterator[RunAs]:
    """A uid of the delivery's own while the block runs (slot_user), with its
    workspace, home and events file made its own."""
    with slot_user() as user:
        _hand_over(run_dir, user)
        yield user


@contextlib.contextmanager
def slot_user() -> Iterator[RunAs]:
    """The first free slot's uid while the block runs, held by a lock the kernel drops
    when this process dies. When the block ends, whatever of the uid is still running
    is killed and what it left outside its folder deleted (worker.leftovers): the
    slot's next delivery starts with nothing of this one's. A delivery that died
    holding the slot never got that far: the next one does it first. Its processes
    start in an IPC namespace of the delivery's own where the kernel allows one
    (core.evaluation.credentials.own_ipc)."""
    slot, lock = _lease()
    base = _uid_base()
    ipc = own_ipc()
    user = RunAs(base + slot, base + slot, ipc)
    try:
        if os.pread(lock, len(_ENDED), 0) != _ENDED:
            _end(user)
        # Overwritten in place: truncating frees the file's block, which a filesystem
        # mounted with `discard` sends to the disk (0.1 ms a delivery).
        os.pwrite(lock, _BEGUN, 0)
        yield user
    finally:
        try:
            _end(user)
            os.pwrite(lock, _ENDED, 0)
        finally:
            os.close(lock)
            if ipc is not None:  # its last process is gone: the namespace goes now
                os.close(ipc)


# Written in a slot's lock file once its delivery's user has been ended (an older
# evalfleet wrote nothing there): the next delivery need not end it again. The
# delivery that leases the slot writes the other, of the same length, over it.
_ENDED, _BEGUN = b"ended", b"begun"


def _end(user: RunAs) -> None:
    user.kill_all()
    clear_leftovers(user, RUN_UIDS)


def _uid_base() -> int:
    """This machine's block of run uids, drawn at random once per machine (once per
    /run). Containers of one host each have a /run of their own and lease their slots
    apart, but uids are the kernel's: in one block, the host's sweep for its run
    user's processes (it sees every container's) would kill another container's
    agents."""
    path = users_root() / "uid-base"
    try:
        kept = int(path.read_text())
    except FileNotFoundError:
        pass
    else:
        if _is_block(kept):
            return kept
        # Drawn by an older evalfleet from a wider range (uids bubblewrap refuses).
        path.unlink(missing_ok=True)
    drawn = UID_BASE + secrets.randbelow(UID_BLOCKS) * UID_SLOTS
    # Written whole, then linked into place: a reader never sees half a number.
    draft = path.with_name(f"uid-base.{os.getpid()}")
    draft.write_text(str(drawn))
    try:
        os.link(draft, path)
    except FileExistsError:  # another process drew first: its block is the machine's
        drawn = int(path.read_text())
    finally:
        draft.unlink()
    return drawn


def _is_block(base: int) -> bool:
    return base in RUN_UIDS and (base - UID_BASE) % UID_SLOTS == 0


def _lease() -> tuple[int, int]:
    folder = users_root()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if folder.stat().st_uid != 0 or folder.is_symlink():  # made by another user to steer ours
        raise SetupError(f"{folder} is not root's own folder; remove it")
    for slot in range(UID_SLOTS):
        fd = os.open(folder / f"{slot}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return slot, fd
    raise SetupError(f"all {UID_SLOTS} run users of this machine are busy")


def _hand_over(run_dir: RunDir, user: RunAs) -> None:
    """The workspace, the home and the events file become the user's; the folders
    above them only traversable (no listing another delivery's name)."""
    try:
        for folder in (work_root(), run_dir.root):
            folder.chmod(0o711)
        for readable in run_dir.handed:
            readable.chmod(0o644)
        run_dir.events_file.touch()
        for top in (run_dir.workspace, run_dir.home, run_dir.events_file, run_dir.logs):
            chown_tree(top, user)
    except OSError as exc:
        raise SetupError(f"handing the workspace to the run's user failed: {exc}") from exc
