"""What a run's own user leaves on the machine past its processes, cleared when the
delivery ends (worker.confinement.slot_user).

A slot's uid is leased again by the slot's next run, and its files outlive it: a
mark in /tmp, a copy of the hidden tests a planted conftest.py made while the gates
ran, read back by the next run's agent. Killing every process of the uid does not
reach what the kernel keeps for a uid or for no process at all:

- files in the folders any user may write (SHARED_FOLDERS), and below them in the
  world-writable folders others made there: every entry the uid owns is deleted,
  whatever its name (a hard link to its own file included);
- System V shared memory, message queues and semaphore sets it created or owns,
  and POSIX message queues (in /dev/mqueue, where it is mounted), where its
  processes ran in the worker's IPC namespace rather than one of their own
  (core.evaluation.credentials.own_ipc: a container's root may not make one);
- its keyrings: the user keyring, the user session keyring and the persistent one,
  which the kernel keeps per uid, not per process (add_key(2) in one run,
  keyctl(2) in the next), where its processes could make keys at all (the keyring
  calls are refused to them where the kernel lets root filter a thread's calls:
  core.evaluation.credentials).

Run uids' own world-writable folders are not walked into: each is deleted whole
when its own uid's delivery ends, so an agent cannot nest one deep enough to
make this sweep slow.
"""

from __future__ import annotations

import ctypes
import logging
import os
import stat
import time
from collections.abc import Callable

from core.evaluation.credentials import KEYCTL, RunAs, keyctl, unsealed
from worker.workspace import remove_tree

SHARED_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")

_KEYCTL_CLEAR = 7
_KEYCTL_LINK = 8
_KEYCTL_UNLINK = 9
_KEYCTL_GET_PERSISTENT = 22
_KEY_SPEC_THREAD_KEYRING = -1
_KEY_SPEC_USER_KEYRING = -4
_KEY_SPEC_USER_SESSION_KEYRING = -5
_IPC_RMID = 0
_libc = ctypes.CDLL(None, use_errno=True)
log = logging.getLogger(__name__)


def clear_leftovers(user: RunAs, run_uids: range) -> None:
    """Deletes what `user` left outside its run's folder: its files in the shared
    folders, its System V objects and its keys. Call it once no process of the user
    is left (RunAs.kill_all); `run_uids` are every run user's, whose folders are not
    walked into."""
    for top in SHARED_FOLDERS:
        _sweep(top, user.uid, run_uids)
    if user.ipc is None:  # else they are in its own namespace, and go with it
        _remove_ipc(user.uid)
    _clear_keys(user)


def _sweep(top: str, uid: int, run_uids: range) -> None:
    """Every entry below `top` that `uid` owns deleted, links not followed. Folders are
    opened by descriptor, each relative to the one above, so that nobody renaming a
    folder meanwhile can steer root's deletions elsewhere."""
    try:
        pending = [os.open(top, os.O_RDONLY | os.O_DIRECTORY)]
    except OSError:  # not on this machine
        return
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    while pending:
        folder = pending.pop()
        try:
            for name in _walked_into(folder, uid, run_uids):
                try:
                    pending.append(os.open(name, flags, dir_fd=folder))
                except OSError:
                    continue
        finally:
            os.close(folder)


# Each folder's world-writable subfolders as its last sweep in this process listed
# them, with the modification time it had then, for folders that then held nothing
# of any run user's: a run user can add an entry only by changing that time (to
# now: only a folder's owner may set it back), so while it is the same, the listing
# is, and the folder's entries need no stat each (a /tmp of 60 entries cost 8 % of a
# no-op run).
_listed: dict[tuple[int, int], tuple[int, list[str]]] = {}
# A time a folder has had for this long is not the time a change in the same clock
# tick would give it again (file times are coarser than nanoseconds).
_SETTLED_NS = 50_000_000


def _walked_into(folder: int, uid: int, run_uids: range) -> list[str]:
    """What `uid` owns in `folder` deleted; the world-writable subfolders to walk into
    (not run users': each is deleted whole when its own delivery ends)."""
    before = os.fstat(folder)
    key = (before.st_dev, before.st_ino)
    kept = _listed.get(key)
    if kept is not None and kept[0] == before.st_mtime_ns:
        return kept[1]
    with os.scandir(folder) as listing:
        entries = list(listing)
    subfolders: list[str] = []
    runs_own = False
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        runs_own = runs_own or info.st_uid in run_uids
        if info.st_uid == uid:
            _delete(folder, entry.name, stat.S_ISDIR(info.st_mode))
        elif (
            stat.S_ISDIR(info.st_mode)
            and info.st_mode & stat.S_IWOTH
            and info.st_uid not in run_uids
        ):
            subfolders.append(entry.name)
    settled = time.time_ns() - before.st_mtime_ns > _SETTLED_NS
    if not runs_own and settled:
        _listed[key] = (before.st_mtime_ns, subfolders)
    else:
        _listed.pop(key, None)
    return subfolders


def _delete(folder: int, name: str, is_dir: bool) -> None:
    try:
        if is_dir:
            remove_tree(name, dir_fd=folder)
        else:
            os.unlink(name, dir_fd=folder)
    except FileNotFoundError:
        pass
    except OSError as exc:  # the run's result stands; the machine's owner is told
        log.warning("could not delete what a run's user left in the shared folders: %s", exc)


def _remove_ipc(uid: int) -> None:
    """System V objects `uid` owns or created, removed (a segment still attached goes
    when its last process detaches; none of the user's is left by then)."""
    removers: tuple[tuple[str, str, Callable[[int], object]], ...] = (
        ("shm", "shmid", lambda ident: _libc.shmctl(ident, _IPC_RMID, None)),
        ("msg", "msqid", lambda ident: _libc.msgctl(ident, _IPC_RMID, None)),
        ("sem", "semid", lambda ident: _libc.semctl(ident, 0, _IPC_RMID)),
    )
    for kind, ident_name, remove in removers:
        try:
            header, *rows = _read(f"/proc/sysvipc/{kind}").splitlines()
        except (OSError, ValueError):  # no System V IPC in this kernel
            continue
        names = header.split()
        ident_at, uid_at, cuid_at = names.index(ident_name), names.index("uid"), names.index("cuid")
        for row in rows:
            fields = row.split()
            if uid in (int(fields[uid_at]), int(fields[cuid_at])):
                remove(int(fields[ident_at]))


def _read(path: str) -> str:
    """A /proc file's text by raw reads (a third of Path.read_text's time, and this is
    read in every delivery)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks).decode()
    finally:
        os.close(fd)


def _clear_keys(user: RunAs) -> None:
    """The user's keyrings emptied. Its user keyring and user session keyring are
    emptied as the user (they are found by the calling thread's uid), the user keyring
    linked into the session one again as the kernel first made it. Its persistent
    keyring only a possessor may empty: root links it into this thread's own keyring,
    empties it and unlinks it. A keyring the user's processes alone held (a named
    session keyring: the next run could join it by name) goes once the kernel's
    collector gets to it: this waits for that, up to a second, and not again for a
    user whose keys outlived it (reported: they stay for later runs to read)."""
    owned = 0 if KEYCTL is None else _keys_of(user.uid)
    if owned == 0:  # it never had a key (or this kernel has no keyrings)
        return
    # A thread that started the user's commands is refused the keyring calls for good
    # (core.evaluation.credentials): the keys are emptied from one that never was.
    persistent, emptied = unsealed(lambda: _empty(user))
    if not emptied:
        # Its owner may take its own write permission off a keyring, and no one
        # else may empty it then (not root, who does not possess it): its keys stay
        # for later runs (docs/RELIABILITY.md). Nothing left to wait for.
        _report(user.uid, "its agent locked its keyrings")
        return
    kept = 2 + (persistent > 0)  # the keyrings themselves, now they are there
    if user.uid in _unwaited:
        return
    deadline = time.monotonic() + 1.0
    while _keys_of(user.uid) > kept:
        if time.monotonic() > deadline:
            # Held where no one can take it back: a keyring made a restriction of its
            # user keyring (KEYCTL_RESTRICT_KEYRING), kept until the machine restarts.
            _unwaited.add(user.uid)
            _report(user.uid, "its agent left keys no one can remove")
            return
        time.sleep(0.005)


def _empty(user: RunAs) -> tuple[int, bool]:
    """The user's keyrings emptied from the calling thread: its persistent keyring
    linked into root's thread keyring, emptied and unlinked; its user and user session
    keyrings emptied as the user. Returns the persistent keyring's id (0: it has
    none) and whether all were emptied."""
    persistent = keyctl(_KEYCTL_GET_PERSISTENT, user.uid, _KEY_SPEC_THREAD_KEYRING)
    emptied = True
    if persistent > 0:
        emptied = keyctl(_KEYCTL_CLEAR, persistent) == 0
        keyctl(_KEYCTL_UNLINK, persistent, _KEY_SPEC_THREAD_KEYRING)
    with user.this_thread(seal=False):
        for ring in (_KEY_SPEC_USER_KEYRING, _KEY_SPEC_USER_SESSION_KEYRING):
            emptied = keyctl(_KEYCTL_CLEAR, ring) == 0 and emptied
        keyctl(_KEYCTL_LINK, _KEY_SPEC_USER_KEYRING, _KEY_SPEC_USER_SESSION_KEYRING)
    return persistent, emptied


# Run users whose keys outlived a second's wait in this process: no later delivery
# of theirs waits for a collection that will not come. And what was reported, once.
_unwaited: set[int] = set()
_reported: set[tuple[int, str]] = set()


def _report(uid: int, what: str) -> None:
    if (uid, what) not in _reported:
        _reported.add((uid, what))
        log.warning(
            "run user %d: %s, which later runs can read; a root worker with "
            "CAP_SYS_ADMIN refuses run users the keyring calls, and so does docker",
            uid,
            what,
        )


def _keys_of(uid: int) -> int:
    """How many keys `uid` owns, as /proc/key-users counts them (0 when it has none)."""
    try:
        listing = _read("/proc/key-users")
    except OSError:
        return 0
    for line in listing.splitlines():
        owner, _, counts = line.partition(":")
        if owner.strip() == str(uid):
            return int(counts.split()[1].split("/")[0])
    return 0
