"""A seccomp filter that refuses a thread, and all it starts, the ways to a keyring that
outlives a run: the keyring calls (add_key, request_key, keyctl), as docker's default
profile does, and the ioctl that adds an fscrypt key, which docker's allows (on a
filesystem with ext4's `encrypt` feature it puts a key where any uid may look).
core.evaluation.credentials installs it on the thread that starts a run's commands.

The program is classic BPF over struct seccomp_data, built per machine for every
ABI a process there may call the kernel with (an x86_64 process may also make i386
and x32 calls), and refuses with EPERM.
"""

from __future__ import annotations

import ctypes
import platform
from dataclasses import dataclass

_libc = ctypes.CDLL(None, use_errno=True) if platform.system() == "Linux" else None


@dataclass(frozen=True)
class Abi:
    """One way a process may call the kernel, by the audit architecture seccomp reports
    for it: its keyring calls' numbers (add_key, request_key, keyctl) and its ioctl's,
    by which a process adds an fscrypt key to a filesystem's keyring, readable by any
    uid, where a filesystem with ext4's `encrypt` feature is at hand."""

    arch: int
    keyring: tuple[int, int, int]
    ioctl: tuple[int, ...]


# An x86_64 process may also make i386 calls (int 0x80) and x32 ones (the number with
# bit 30 set, masked off below: x32's ioctl is 514); aarch64 and riscv64 kernels may
# run 32-bit programs too.
ABIS: dict[str, tuple[Abi, ...]] = {
    "x86_64": (
        Abi(0xC000003E, (248, 249, 250), (16, 514)),
        Abi(0x40000003, (286, 287, 288), (54,)),
    ),
    "aarch64": (
        Abi(0xC00000B7, (217, 218, 219), (29,)),
        Abi(0x40000028, (309, 310, 311), (54,)),
    ),
    "riscv64": (
        Abi(0xC00000F3, (217, 218, 219), (29,)),
        Abi(0x400000F3, (217, 218, 219), (29,)),
    ),
}
_X32_BIT = 0x40000000
_FS_IOC_ADD_ENCRYPTION_KEY = 0xC0506617  # the kernel reads an ioctl's command as 32 bits
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_SECCOMP_CALL = {"x86_64": 317, "aarch64": 277, "riscv64": 277}
_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_SPEC_ALLOW = 1, 1 << 2
_RET_ALLOW, _RET_EPERM = 0x7FFF0000, 0x00050000 | 1
# Classic BPF: load a word of seccomp_data (nr at 0, arch at 4, the low word of the
# second argument at 24 on a little-endian machine), AND, jump if equal, return.
_LD_ABS, _AND, _JEQ, _RET = 0x20, 0x54, 0x15, 0x06
_NR, _ARCH, _ARG1 = 0, 4, 24


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def keyring_filter(abis: tuple[Abi, ...]) -> list[tuple[int, int, int, int]]:
    """A seccomp program, as (code, jt, jf, k) instructions, that fails each ABI's
    keyring calls, and its ioctl that adds an fscrypt key, with EPERM and allows
    everything else."""
    # Written with labels for jump targets (None: the next instruction), then resolved.
    steps: list[tuple[int, str | None, str | None, int] | str] = []
    for n, abi in enumerate(abis):
        after, command = f"after {n}", f"command {n}"
        steps += [(_LD_ABS, None, None, _ARCH), (_JEQ, None, after, abi.arch)]
        steps += [(_LD_ABS, None, None, _NR), (_AND, None, None, 0xFFFFFFFF & ~_X32_BIT)]
        steps += [(_JEQ, "deny", None, number) for number in abi.keyring]
        steps += [(_JEQ, command, None, number) for number in abi.ioctl]
        steps += [(_JEQ, after, after, 0)]  # neither: past the command's check
        steps += [command, (_LD_ABS, None, None, _ARG1)]
        steps += [(_JEQ, "deny", None, _FS_IOC_ADD_ENCRYPTION_KEY), after]
    steps += [(_RET, None, None, _RET_ALLOW), "deny", (_RET, None, None, _RET_EPERM)]
    at: dict[str, int] = {}
    program: list[tuple[int, str | None, str | None, int]] = []
    for step in steps:
        if isinstance(step, str):
            at[step] = len(program)
        else:
            program.append(step)

    def offset(label: str | None, index: int) -> int:
        return 0 if label is None else at[label] - index - 1

    return [(code, offset(jt, i), offset(jf, i), k) for i, (code, jt, jf, k) in enumerate(program)]


def refuse_keyring_calls() -> None:
    """This machine's ABIS' keyring calls and fscrypt ioctl refused to the calling thread
    and all it starts from now on, for good (root may install a seccomp filter without
    no_new_privs, so the run's setuid programs keep working). Nothing where that
    cannot be (another machine, no CAP_SYS_ADMIN): the keyrings are emptied at the
    delivery's end."""
    abis = ABIS.get(platform.machine())
    if _libc is None or abis is None:
        return
    program = keyring_filter(abis)
    instructions = (_SockFilter * len(program))(*(_SockFilter(*step) for step in program))
    fprog = _SockFprog(len(program), instructions)
    # With SPEC_ALLOW: before Linux 5.16 a filter also turned on the speculative store
    # bypass mitigation for the thread and all it starts, which slows every agent and
    # protects nothing of the worker's. A kernel without the flag (before 4.17) or
    # without seccomp(2) by number here takes the filter by prctl.
    seccomp = _SECCOMP_CALL.get(platform.machine())
    if (
        seccomp is not None
        and _libc.syscall(
            ctypes.c_long(seccomp),
            ctypes.c_ulong(_SECCOMP_SET_MODE_FILTER),
            ctypes.c_ulong(_SECCOMP_FILTER_FLAG_SPEC_ALLOW),
            ctypes.byref(fprog),
        )
        == 0
    ):
        return
    _libc.prctl(
        ctypes.c_int(_PR_SET_SECCOMP),
        ctypes.c_ulong(_SECCOMP_MODE_FILTER),
        ctypes.byref(fprog),
        ctypes.c_ulong(0),
        ctypes.c_ulong(0),
    )
