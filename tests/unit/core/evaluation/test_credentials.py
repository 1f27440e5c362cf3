"""A root worker's thread becoming a run's user for a moment (core.evaluation.credentials):
what it starts is that user's whole and for good, the worker's other threads and the
thread afterwards are root's, and kill_all ends every process of the user and no one
else's."""

from __future__ import annotations

import ast
import contextlib
import ctypes
import errno
import os
import platform
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.evaluation.credentials import SUPPORTED, RunAs, unsealed
from tests.support.users import gone, pids_of

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not SUPPORTED, reason="switching users needs a root worker on Linux"
)

# Far from the uids worker.confinement leases, so no test run's sweep meets these.
USER = RunAs(2_000_000_001, 2_000_000_001)


def _status(fields: tuple[str, ...]) -> dict[str, list[str]]:
    with USER.this_thread():
        done = subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True)
    lines = (line.split(":", 1) for line in done.stdout.splitlines())
    return {name: value.split() for name, value in lines if name in fields}


def test_a_command_started_as_the_user_is_the_users_whole_with_no_way_back() -> None:
    status = _status(("Uid", "Gid", "Groups", "CapPrm", "CapEff", "CapAmb"))
    assert status["Uid"] == [str(USER.uid)] * 4  # real, effective, saved, filesystem
    assert status["Gid"] == [str(USER.gid)] * 4
    assert status["Groups"] == []
    assert status["CapPrm"] == status["CapEff"] == status["CapAmb"] == ["0000000000000000"]
    with USER.this_thread():
        done = subprocess.run(["setpriv", "--reuid=0", "true"], capture_output=True, text=True)
    assert done.returncode != 0 and "not permitted" in done.stderr


def test_only_the_switching_thread_is_the_user_and_only_while_the_block_runs() -> None:
    groups = os.getgroups()
    inside, outside = threading.Event(), threading.Event()
    seen: list[int] = []

    def switched() -> None:
        with USER.this_thread():
            seen.append(os.geteuid())
            inside.set()
            outside.wait(10)
        seen.append(os.geteuid())

    thread = threading.Thread(target=switched)
    thread.start()
    assert inside.wait(10)
    assert os.geteuid() == 0  # this thread meanwhile: still root
    outside.set()
    thread.join(10)
    assert seen == [USER.uid, 0]
    assert os.getresuid() == (0, 0, 0) and os.getgroups() == groups


def test_a_thread_switched_back_after_an_error_in_the_block_is_root_again() -> None:
    with pytest.raises(RuntimeError), USER.this_thread():
        raise RuntimeError("the command could not start")
    assert os.getresuid() == (0, 0, 0) and os.getresgid() == (0, 0, 0)


# Leaves a daemon that left the group and renamed itself, and one that made itself
# undumpable (its /proc shows root as owner), both of them waiting.
_HIDING = r"""
setsid bash -c 'exec -a innocent sleep 300' &
python3 -c 'import ctypes, time; ctypes.CDLL(None).prctl(4, 0); time.sleep(300)' &
"""


def test_kill_all_ends_every_process_of_the_user_and_none_of_another() -> None:
    # Their own: this file's other tests run USER's commands side by side, which the
    # counts below would take for a hiding daemon.
    hider, other = RunAs(2_000_000_004, 2_000_000_004), RunAs(2_000_000_005, 2_000_000_005)
    try:
        for user in (hider, other):
            with user.this_thread():
                subprocess.Popen(["bash", "-c", _HIDING], start_new_session=True).wait()
        deadline = time.monotonic() + 10
        while len(pids_of(hider.uid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(pids_of(hider.uid)) == 2
        assert hider.kill_all()
        assert gone(hider.uid, timeout=10)
        assert len(pids_of(other.uid)) == 2
    finally:
        for user in (hider, other):
            user.kill_all()
    assert os.getresuid() == (0, 0, 0)


# The session keyring a process has, by number, and whether it may add a key to it
# (keyctl is syscall 250 on x86_64, 219 on aarch64 and riscv64; add_key 248 and 217;
# KEYCTL_GET_KEYRING_ID is 0), read independently of the code under test.
_SESSION = r"""
import ctypes, platform
add_key, keyctl = {"x86_64": (248, 250)}.get(platform.machine(), (217, 219))
libc = ctypes.CDLL(None)
def call(n, *args):
    return libc.syscall(*[ctypes.c_long(a) if isinstance(a, int) else a for a in (n, *args)])
print(call(keyctl, 0, -3, 0), call(add_key, b"user", b"mark", b"hi", 2, -3) > 0)
"""


def test_what_the_user_starts_cannot_use_the_workers_session_keyring() -> None:
    """A worker started in a session keyring of its own (a systemd service's, a
    container's) would hand it to every run's agents, which could leave keys there
    for the next: what the user starts has one no one may use instead."""

    def session_of_a_child() -> tuple[int, bool]:
        done = subprocess.run(["/usr/bin/python3", "-c", _SESSION], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        ring, added = done.stdout.split()
        return int(ring), added == "True"

    seen: list[tuple[int, bool]] = []

    def worker() -> None:  # in a thread of its own: what it joins stays with it
        libc = ctypes.CDLL(None, use_errno=True)
        number = {"x86_64": 250}.get(platform.machine(), 219)
        joined = libc.syscall(ctypes.c_long(number), ctypes.c_long(1), b"evalfleet-test-session")
        assert joined > 0, ctypes.get_errno()
        seen.append(session_of_a_child())
        with USER.this_thread():
            seen.append(session_of_a_child())

    # Started by the process's unsealed thread: one started by a thread that ran a
    # user's command (this one may have, in another test) is refused keyctl itself.
    thread = threading.Thread(target=worker)
    unsealed(thread.start)
    thread.join(30)
    (workers, root_adds), (users, user_adds) = seen
    assert root_adds  # the worker's own, as a root child sees it
    assert users != workers and not user_adds


# An agent's every way to a keyring, read independently of the code under test:
# keyctl(KEYCTL_GET_KEYRING_ID, session), add_key and request_key by the native
# numbers, the ioctl that adds an fscrypt key, keyctl again with x32's bit set, and
# (on x86_64) by the i386 ABI with `int 0x80`, which seccomp reports as another
# architecture. Prints each one's errno (0: it worked).
_EVERY_WAY = r"""
import ctypes, mmap, os, platform
native = {"x86_64": (248, 249, 250, 16)}.get(platform.machine(), (217, 218, 219, 29))
add_key, request_key, keyctl, ioctl = native
libc = ctypes.CDLL(None, use_errno=True)
def errno(n, *args):
    ctypes.set_errno(0)
    r = libc.syscall(*[ctypes.c_long(a) if isinstance(a, int) else a for a in (n, *args)])
    return ctypes.get_errno() if r < 0 else 0
ways = {
    "keyctl": errno(keyctl, 0, -3, 1),
    "add_key": errno(add_key, b"user", b"mark", b"hi", 2, -4),
    "request_key": errno(request_key, b"user", b"mark", None, -4),
    # FS_IOC_ADD_ENCRYPTION_KEY on a folder: an fscrypt key, on a filesystem that
    # has ext4's `encrypt` feature (this one need not: the filter answers first).
    "fscrypt key": errno(ioctl, os.open("/", os.O_RDONLY), 0xC0506617, bytes(80)),
}
if platform.machine() == "x86_64":
    ways["x32 keyctl"] = errno(0x40000000 | keyctl, 0, -3, 1)
    # push rbx; mov eax, 288 (i386 keyctl); xor ebx, ebx; mov ecx, -3; mov edx, 1;
    # int 0x80; pop rbx; ret
    code = bytes.fromhex("53b82001000031dbb9fdffffffba01000000cd805bc3")
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    function = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
    ways["i386 keyctl"] = -min(function(), 0)
print(ways)
"""


def test_what_the_user_starts_is_refused_the_keyring_calls_by_every_way_in() -> None:
    """An agent with keyring calls could lock its user's keyrings against emptying, or
    pin one as a restriction of its user keyring until the machine restarts, and leave
    keys there for the slot's next run: what a sealed thread starts is refused them
    (as under docker's default seccomp profile), and the ioctl that adds an fscrypt
    key too (which docker's allows); the process's unsealed thread is not."""

    def ways(user: RunAs | None) -> dict[str, int]:
        with contextlib.nullcontext() if user is None else user.this_thread():
            done = subprocess.run(
                ["/usr/bin/python3", "-c", _EVERY_WAY], capture_output=True, text=True, cwd="/"
            )
        assert done.returncode == 0, done.stderr
        return dict(ast.literal_eval(done.stdout))

    seen: dict[str, dict[str, int]] = {}
    agent = RunAs(2_000_000_003, 2_000_000_003)  # its own: tests run side by side

    def sealed_thread() -> None:  # in a thread of its own: the filter stays with it
        seen["user"] = ways(agent)
        seen["root after"] = ways(None)  # as root, from the sealed thread: refused too

    thread = threading.Thread(target=sealed_thread)
    thread.start()
    thread.join(30)
    refused = {way: errno.EPERM for way in seen["user"]}
    assert len(refused) == (6 if platform.machine() == "x86_64" else 4)
    assert seen["user"] == refused and seen["root after"] == refused
    # The process's unsealed thread is not refused them (nor is any thread not started
    # from a sealed one: this test's may have been sealed by another test).
    allowed = unsealed(lambda: ways(None))
    assert allowed["keyctl"] == 0 and allowed["add_key"] == 0, allowed
    assert allowed["fscrypt key"] not in (0, errno.EPERM)  # no such filesystem here
    assert allowed.get("i386 keyctl", 0) in (0, errno.ENOSYS)  # where the ABI is built


# Adds a v2 fscrypt key (FS_IOC_ADD_ENCRYPTION_KEY: struct fscrypt_add_key_arg, its
# key specifier of type IDENTIFIER, 64 raw bytes) to the filesystem of the folder
# given, as the helper trial did: prints the errno (0: added, for any uid to find).
_FSCRYPT = r"""
import ctypes, os, platform, struct, sys
ioctl = {"x86_64": 16}.get(platform.machine(), 29)
libc = ctypes.CDLL(None, use_errno=True)
spec = struct.pack("<II32s", 2, 0, bytes(32))
arg = ctypes.create_string_buffer(spec + struct.pack("<II32s", 64, 0, bytes(32)) + b"k" * 64)
fd = os.open(sys.argv[1], os.O_RDONLY)
ctypes.set_errno(0)
done = libc.syscall(ctypes.c_long(ioctl), ctypes.c_long(fd), ctypes.c_long(0xC0506617), arg)
print(ctypes.get_errno() if done < 0 else 0)
"""


@pytest.fixture
def encrypting_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A small ext4 with the `encrypt` feature, loop-mounted (what a host's disk may
    have); skipped where this machine cannot make one."""
    image, mounted = tmp_path / "fs.img", tmp_path / "mounted"
    mounted.mkdir()
    tools = ["mkfs.ext4", "mount", "umount"]
    if any(shutil.which(tool) is None for tool in tools):
        pytest.skip("no mkfs.ext4 or mount here")
    with image.open("wb") as made:
        made.truncate(16 * 1024 * 1024)
    steps = (
        ["mkfs.ext4", "-q", "-O", "encrypt", str(image)],
        ["mount", "-o", "loop", str(image), str(mounted)],
    )
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot make an encrypting filesystem here: {done.stderr.strip()}")
    try:
        os.chmod(mounted, 0o755)
        yield mounted
    finally:
        subprocess.run(["umount", "-l", str(mounted)], check=False)  # its keys go with it


def test_an_fscrypt_key_cannot_be_added_by_what_the_user_starts(
    encrypting_filesystem: Path,
) -> None:
    """Found by a helper's trial: FS_IOC_ADD_ENCRYPTION_KEY, an ioctl on any folder of
    a filesystem with ext4's `encrypt` feature, puts a key in that filesystem's
    keyring, where any uid may look for it and no end of a delivery clears it."""
    agent = RunAs(2_000_000_006, 2_000_000_006)  # its own: tests run side by side
    argv = ["/usr/bin/python3", "-c", _FSCRYPT, str(encrypting_filesystem)]
    seen: list[str] = []

    def sealed_thread() -> None:
        with agent.this_thread():
            seen.append(subprocess.run(argv, capture_output=True, text=True, cwd="/").stdout)

    thread = threading.Thread(target=sealed_thread)
    thread.start()
    thread.join(30)
    assert seen == [f"{errno.EPERM}\n"]

    # The way in is real: unsealed, the same uid adds the key.
    def unsealed_run() -> str:
        with agent.this_thread(seal=False):
            return subprocess.run(argv, capture_output=True, text=True, cwd="/").stdout

    assert unsealed(unsealed_run) == "0\n"
