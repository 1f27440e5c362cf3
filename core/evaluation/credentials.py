"""The user a run's commands run as, and how a root worker becomes it for a moment.

A worker running as root runs each delivery's commands as a uid of its own
(worker.confinement). Linux keeps credentials per thread, and a child process
takes the credentials of the thread that started it. So the thread that starts
a command switches its own credentials to the run's user, with the raw system
calls (glibc's wrappers would switch every thread of the worker), starts the
command as it always does, and switches back: no program in between to change
users (util-linux's setpriv cost an exec, ~1.2 ms of CPU a command) and no fork
of the whole worker (Popen's own `user=` forks instead of vforking).

The saved uid stays root's while the thread is switched, which is what lets it
switch back; the command cannot do the same, because execve copies the effective
uid into the saved one: it starts with real, effective and saved uid (and gids)
the run user's, no supplementary groups and no capabilities.

The same switch ends whatever the user left running: kill(-1) from the user
reaches every process it owns and nothing else, in one atomic pass (a process
forking meanwhile has its child killed too or its fork refused), undumpable,
daemonised or renamed processes included; no scan of /proc.

The thread may take the user into an IPC namespace of the delivery's own
(`own_ipc`): the System V objects and POSIX message queues its processes make
live there and go with it, where no later run, the slot's next included, can
open them by their names. Namespaces too are the thread's own: it enters the
user's before it switches and leaves it after it is root again. So is the session
keyring, which what the thread starts inherits: the thread seals its own first
(`_seal`), so no run's processes share a keyring they may write, and refuses itself
and all it starts the ways to a keyring that outlives the run
(core.evaluation.syscall_filter): an agent could otherwise lock its user's keyrings
against emptying, pin one of its own there until the machine restarts, or leave an
fscrypt key any uid may find. The user's keyrings are emptied from a thread that
was never sealed (`unsealed`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from core.evaluation.syscall_filter import refuse_keyring_calls

# setresuid, setresgid, setgroups: the raw calls, which change the calling thread only.
_SYSCALLS = {
    "x86_64": (117, 119, 116),
    "aarch64": (147, 149, 159),
    "riscv64": (147, 149, 159),
}
_CALLS = _SYSCALLS.get(platform.machine()) if platform.system() == "Linux" else None
SUPPORTED = _CALLS is not None
_libc = ctypes.CDLL(None, use_errno=True) if SUPPORTED else None
# keyctl(2), which glibc does not wrap (libkeyutils does): by number.
KEYCTL = {"x86_64": 250, "aarch64": 219, "riscv64": 219}.get(platform.machine())
_KEYCTL_JOIN_SESSION_KEYRING, _KEYCTL_SETPERM = 1, 5
_KEY_SPEC_SESSION_KEYRING = -3


def keyctl(*args: int) -> int:
    """keyctl(2) with these integer arguments, as the calling thread; -1 on an error."""
    assert _libc is not None and KEYCTL is not None
    return int(_libc.syscall(ctypes.c_long(KEYCTL), *(ctypes.c_long(a) for a in args)))


@dataclass(frozen=True)
class RunAs:
    """The unprivileged user a run's commands run as (worker.confinement): its own, so
    nothing the worker owns is its to write and no other process's environment is its
    to read. `ipc`: a descriptor of the IPC namespace its processes start in
    (`own_ipc`), None for the worker's."""

    uid: int
    gid: int
    ipc: int | None = None

    @contextlib.contextmanager
    def this_thread(self, seal: bool = True) -> Iterator[None]:
        """The calling thread is this user while the block runs (the worker's other
        threads stay root): processes it starts are the user's. Needs a root worker on
        a SUPPORTED machine. The thread is sealed for good first (`_seal`): only a
        thread that starts nothing may skip that (`seal=False`), to reach the user's
        keyrings itself."""
        if _CALLS is None:
            raise OSError(f"switching users is not supported on {platform.machine()}")
        setresuid, setresgid, setgroups = _CALLS
        groups = os.getgroups()
        if seal:
            _seal()
        if self.ipc is not None:
            _enter(self.ipc)  # while root: entering a namespace takes CAP_SYS_ADMIN
        _call(setgroups, 0, None)
        _call(setresgid, self.gid, self.gid, 0)
        _call(setresuid, self.uid, self.uid, 0)
        try:
            yield
        finally:
            # Root's again by the saved uid (which restores its capabilities), then its
            # groups: a thread that cannot switch back must not go on as the worker.
            try:
                _call(setresuid, 0, 0, 0)
                _call(setresgid, 0, 0, 0)
                _call(setgroups, len(groups), (ctypes.c_uint * len(groups))(*groups))
                if self.ipc is not None:
                    _enter(_home_ipc())
            except OSError:
                os.abort()

    def kill_all(self) -> bool:
        """SIGKILL every process of this user (whatever the run left behind ends with
        it). True when there was one (a zombie not yet reaped counts)."""
        with self.this_thread():
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                return False
            return True


def _call(number: int, *args: object) -> None:
    assert _libc is not None
    values = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    if _libc.syscall(ctypes.c_long(number), *values) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


_CLONE_NEWIPC = 0x08000000
_home: int | None = None


def own_ipc() -> int | None:
    """A new IPC namespace for a delivery's user, as a descriptor that keeps it (close it
    once the user's processes are gone, and it goes with all it holds); None where the
    kernel refuses one (no CAP_SYS_ADMIN: a container's root by default)."""
    if _libc is None:
        return None
    home = _home_ipc()
    if _libc.unshare(_CLONE_NEWIPC) != 0:
        return None
    try:
        return os.open("/proc/thread-self/ns/ipc", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        try:
            _enter(home)
        except OSError:  # a thread left in a namespace not the worker's must not go on
            os.abort()


def _home_ipc() -> int:
    """The worker's own IPC namespace, opened once per process."""
    global _home
    if _home is None:
        _home = os.open("/proc/thread-self/ns/ipc", os.O_RDONLY | os.O_CLOEXEC)
    return _home


def _enter(namespace: int) -> None:
    assert _libc is not None
    if _libc.setns(namespace, _CLONE_NEWIPC) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


_sealed = threading.local()


def _seal() -> None:
    """Once per thread: the calling thread's session keyring, which all it starts
    inherit, made one of its own that no one may use (the worker's, a systemd
    service's, a container's or a login's, would be every run's agents' to leave keys
    in for the next); then the keyring calls refused to the thread and all it starts.
    A kernel without keyrings, or one that refuses either, leaves that part as it
    was."""
    if getattr(_sealed, "done", False):
        return
    # First: a thread takes its creator's filter and session keyring.
    _unsealed_thread()
    if KEYCTL is not None and keyctl(_KEYCTL_JOIN_SESSION_KEYRING, 0) > 0:
        keyctl(_KEYCTL_SETPERM, _KEY_SPEC_SESSION_KEYRING, 0)
    refuse_keyring_calls()
    _sealed.done = True


T = TypeVar("T")


def unsealed(call: Callable[[], T]) -> T:
    """`call`'s value, called in a thread of this process the keyring calls are not
    refused to (to empty a run user's keyrings): a thread inherits its creator's
    filter, so that one is started before the process's first thread is sealed."""
    return _unsealed_thread().submit(call).result()


_unsealed_lock = threading.Lock()
_unsealed_one: tuple[int, ThreadPoolExecutor] | None = None  # with the pid it is of


def _unsealed_thread() -> ThreadPoolExecutor:
    """This process's one thread (a forked child has none of its parent's threads),
    started by the caller: an executor of one starts its thread at its first call."""
    global _unsealed_one
    with _unsealed_lock:
        if _unsealed_one is None or _unsealed_one[0] != os.getpid():
            one = ThreadPoolExecutor(max_workers=1, thread_name_prefix="unsealed")
            one.submit(int).result()
            _unsealed_one = (os.getpid(), one)
        return _unsealed_one[1]
