"""What a run's user leaves past its processes (worker.leftovers): an agent plants
marks everywhere any user may write, in System V objects and in its keyrings (as
where the keyring calls are not refused to it), as the user itself; once cleared,
nothing of it is left for the slot's next run, and nothing of anyone else's was
touched."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.evaluation.credentials import SUPPORTED, RunAs, unsealed
from tests.support.trees import nest
from worker.confinement import RUN_UIDS
from worker.leftovers import _sweep, clear_leftovers

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not SUPPORTED, reason="switching users needs a root worker on Linux"
)

# Far from the uids this machine leases, and from test_credentials' own; OTHER is
# not a run user's uid at all (a person's, a service's).
USER = RunAs(2_000_000_011, 2_000_000_011)
OTHER = RunAs(1_400_000_012, 1_400_000_012)
PYTHON = "/usr/bin/python3"  # the system's: readable by any user, unlike a root venv's

# add_key(2) and keyctl(2) by number (x86_64, aarch64/riscv64), read independently of
# the code under test.
_CALLS = r"""
import ctypes, platform, sys
add_key, keyctl = {"x86_64": (248, 250)}.get(platform.machine(), (217, 219))
libc = ctypes.CDLL(None, use_errno=True)
def call(n, *args):
    args = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    return libc.syscall(ctypes.c_long(n), *args)
"""
_KEYS = (
    _CALLS
    + r"""
USER_KEYRING, SESSION, GET_PERSISTENT, SEARCH, JOIN, SETPERM, LINK = -4, -5, 22, 10, 1, 5, 8
# The user's keyrings by name. A process reaches the persistent one only from its
# session keyring (as a login's, its own with the user keyring linked in), before it
# joins the named one.
def each_ring():
    yield "user", USER_KEYRING
    yield "user session", SESSION
    call(keyctl, JOIN, 0)
    call(keyctl, LINK, USER_KEYRING, -3)
    yield "persistent", call(keyctl, GET_PERSISTENT, -1, USER_KEYRING)
    named = call(keyctl, JOIN, b"mark-ring")  # held by this process alone
    call(keyctl, SETPERM, named, 0x3F3F3F3F)  # any process of the user may join it
    yield "named", named
found = []
for name, ring in each_ring():
    mark = f"mark-{name}".encode()
    if sys.argv[1] == "plant":
        assert call(add_key, b"user", mark, b"hi", 2, ring) > 0, name
    elif call(keyctl, SEARCH, ring, b"user", mark, 0) > 0:
        found.append(name)
print(found)
"""
)


def _as(user: RunAs, argv: list[str]) -> str:
    with user.this_thread():
        done = subprocess.run(argv, capture_output=True, text=True, cwd="/", check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _unsealed(user: RunAs, argv: list[str]) -> subprocess.Popen[str]:
    """`argv` started as `user` with the keyring calls allowed, as where the kernel lets
    no thread refuse them (a container's root, another machine): the keys this module
    must clear then. From the process's unsealed thread: a thread that started a run's
    command is refused them for good, and so is every thread it starts."""

    def start() -> subprocess.Popen[str]:
        with user.this_thread(seal=False):
            return subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/"
            )

    return unsealed(start)


def _keys_as(user: RunAs, script: str, *args: str) -> str:
    process = _unsealed(user, [PYTHON, "-c", script, *args])
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    return out


def _ipc_of(user: RunAs) -> list[str]:
    """The System V objects `user` owns, as /proc lists them."""
    owned = []
    for kind in ("shm", "msg", "sem"):
        header, *rows = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
        uid_at = header.split().index("uid")
        owned += [
            f"{kind} {row.split()[1]}" for row in rows if int(row.split()[uid_at]) == user.uid
        ]
    return owned


def _keys_owned(user: RunAs) -> int:
    for line in Path("/proc/key-users").read_text().splitlines():
        owner, _, counts = line.partition(":")
        if owner.strip() == str(user.uid):
            return int(counts.split()[1].split("/")[0])  # usage nkeys/nikeys ...
    return 0


@pytest.fixture
def token() -> Iterator[str]:
    token = uuid.uuid4().hex[:12]
    yield token
    for top in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock"):
        subprocess.run(f"rm -rf {top}/*{token}*", shell=True, check=False)


def test_what_the_user_left_anywhere_any_user_may_write_is_gone_and_only_that(
    token: str,
) -> None:
    # Folders of others the user may write into: root's sticky one, another user's.
    shared = Path(f"/tmp/shared-{token}")
    shared.mkdir()
    shared.chmod(0o1777)
    theirs = Path(f"/tmp/theirs-{token}")
    _as(OTHER, ["bash", "-c", f"mkdir -m 777 {theirs}; echo kept > {theirs}/own"])
    plant = f"""
    set -e
    for top in /tmp /var/tmp /dev/shm /run/lock; do echo hi > $top/mark-{token}; done
    chmod 644 /tmp/mark-{token}
    ln /tmp/mark-{token} /var/tmp/link-{token}
    ln -s /etc/hostname /tmp/symlink-{token}
    mkdir -m 777 /tmp/dir-{token}; echo hi > /tmp/dir-{token}/inside
    echo hi > {shared}/mark; mkdir {shared}/folder; echo hi > {shared}/folder/deep
    echo hi > {theirs}/mark
    mkdir -m 000 /tmp/locked-{token}
    ipcmk -M 4096 -p 644 >/dev/null; ipcmk -Q -p 644 >/dev/null; ipcmk -S 1 -p 644 >/dev/null
    """
    before = set(_ipc_of(USER))
    _as(USER, ["bash", "-c", plant])
    with USER.this_thread():  # this thread's files are the user's meanwhile
        deep = Path(f"/tmp/deep-{token}")
        deep.mkdir()
        nest(deep)
    _keys_as(USER, _KEYS, "plant")
    assert len(set(_ipc_of(USER)) - before) == 3  # an earlier failed run's may be there
    assert _keys_as(USER, _KEYS, "look").strip() != "[]"
    hostname = Path("/etc/hostname").read_bytes()

    clear_leftovers(USER, RUN_UIDS)
    # Its user, user session and persistent keyrings are all it still has: the named
    # one is collected before the slot's next delivery could join it.
    assert _keys_owned(USER) <= 3

    left = [
        str(path)
        for top in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
        for path in Path(top).glob(f"*{token}*")
    ]
    assert sorted(left) == [str(shared), str(theirs)]
    assert sorted(p.name for p in shared.iterdir()) == []  # the user's, wherever they sat
    assert [p.name for p in theirs.iterdir()] == ["own"]  # the other user's, untouched
    assert (theirs / "own").read_text() == "kept\n"
    assert Path("/etc/hostname").read_bytes() == hostname  # a link's target is not followed
    assert shared.stat().st_mode & 0o7777 == 0o1777
    assert _ipc_of(USER) == []
    assert _keys_as(USER, _KEYS, "look").strip() == "[]"


def test_a_world_writable_folder_of_another_run_user_is_left_to_its_own_sweep(
    token: str,
) -> None:
    """A run user's folder is deleted whole when its own delivery ends: another run's
    sweep does not walk it, so no agent can nest one deep to slow every sweep."""
    other_run = RunAs(RUN_UIDS.start + 17, RUN_UIDS.start + 17)
    # Its own: tests run side by side, and this sweep would take another's marks.
    planter = RunAs(2_000_000_015, 2_000_000_015)
    folder = Path(f"/tmp/run-{token}")
    _as(other_run, ["bash", "-c", f"mkdir -m 777 {folder}"])
    _as(planter, ["bash", "-c", f"echo hi > {folder}/mark"])
    clear_leftovers(planter, RUN_UIDS)
    assert (folder / "mark").exists()
    clear_leftovers(other_run, RUN_UIDS)
    assert not folder.exists()


def test_a_folder_listed_quiet_is_listed_again_once_anything_changes_it(tmp_path: Path) -> None:
    """The sweep lists a folder again only when its modification time moved since a
    listing that held nothing of any run user's: what a run user adds moves it, and a
    listing with another run user's entry is not kept (that user's own sweep needs it)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    other_run = RunAs(RUN_UIDS.start + 18, RUN_UIDS.start + 18)
    settled = time.time_ns() - 10**9  # a time the folder has had for a second

    os.utime(shared, ns=(settled, settled))
    _sweep(str(shared), USER.uid, RUN_UIDS)  # quiet: its listing is kept
    _as(USER, ["bash", "-c", f"echo hi > {shared}/mark"])  # moves the folder's time
    _sweep(str(shared), USER.uid, RUN_UIDS)
    assert list(shared.iterdir()) == []

    _as(other_run, ["bash", "-c", f"echo hi > {shared}/theirs"])
    os.utime(shared, ns=(settled, settled))  # as if it had been there a while
    _sweep(str(shared), USER.uid, RUN_UIDS)  # not this user's: left, and listed again next
    assert [p.name for p in shared.iterdir()] == ["theirs"]
    _sweep(str(shared), other_run.uid, RUN_UIDS)
    assert list(shared.iterdir()) == []


# Takes its own write permission off its user and user session keyrings, with a key
# that anyone may read in the first: no one can empty them after it (it keeps
# setattr, to undo it).
_LOCK = (
    _CALLS
    + r"""
call(keyctl, 1, 0)  # a session keyring of its own, the user keyring linked in: possessed
call(keyctl, 8, -4, -3)
if sys.argv[1] == "lock":
    key = call(add_key, b"user", b"locked", b"hi", 2, -4)
    assert key > 0 and call(keyctl, 5, key, 0x3F3F3F3F) == 0
for ring in (-4, -5):
    assert call(keyctl, 5, ring, 0x3B3B0000 if sys.argv[1] == "lock" else 0x3F3F0000) == 0
    assert sys.argv[1] == "lock" or call(keyctl, 7, ring) == 0
"""
)


def test_keyrings_their_user_locked_are_reported_and_not_waited_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    locker = RunAs(2_000_000_013, 2_000_000_013)  # its own: tests run side by side
    try:
        _keys_as(locker, _LOCK, "lock")
        began = time.monotonic()
        with caplog.at_level("WARNING", logger="worker.leftovers"):
            clear_leftovers(locker, RUN_UIDS)
        assert time.monotonic() - began < 0.5  # not the second a collection may take
        assert f"run user {locker.uid}: its agent locked its keyrings" in caplog.text
    finally:
        _keys_as(locker, _LOCK, "unlock")
    clear_leftovers(locker, RUN_UIDS)
    assert _keys_owned(locker) <= 3


# Holds a key of its user in a session keyring of its own while it lives: as a keyring
# an agent made a restriction of its user keyring is held, for good (that one cannot
# be undone until the machine restarts, so a test does not make it).
_HOLD = (
    _CALLS
    + r"""
import time
ring = call(keyctl, 1, b"held-ring")
assert call(add_key, b"user", b"held", b"hi", 2, ring) > 0
print("holding", flush=True)
time.sleep(60)
"""
)


def test_keys_that_outlive_the_clearing_are_reported_once_and_waited_for_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    holder_user = RunAs(2_000_000_014, 2_000_000_014)  # its own: tests run side by side
    holder = _unsealed(holder_user, [PYTHON, "-c", _HOLD])
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
        took = []
        with caplog.at_level("WARNING", logger="worker.leftovers"):
            for _ in range(2):
                began = time.monotonic()
                clear_leftovers(holder_user, RUN_UIDS)
                took.append(time.monotonic() - began)
        warned = f"run user {holder_user.uid}: its agent left keys no one can remove"
        assert caplog.text.count(warned) == 1
        assert took[0] >= 1.0 and took[1] < 0.5  # the second delivery does not wait
    finally:
        holder.kill()
        holder.wait()
