"""The seccomp program that refuses the keyring calls and the ioctl that adds an
fscrypt key (core.evaluation.syscall_filter), run by a small classic-BPF interpreter
for every machine it is built for: on this machine only its own architecture can
be tried live (test_credentials)."""

from __future__ import annotations

import struct

import pytest

from core.evaluation.syscall_filter import ABIS, keyring_filter

ALLOW, EPERM = 0x7FFF0000, 0x00050001
ADD_KEY = 0xC0506617  # FS_IOC_ADD_ENCRYPTION_KEY


def _run(program: list[tuple[int, int, int, int]], nr: int, arch: int, arg1: int = 0) -> int:
    """What the program returns for a call (nr, arch, its second argument): the
    instructions it uses, as the kernel's classic BPF runs them over struct
    seccomp_data (nr, arch, instruction pointer, six arguments; little-endian)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, 0, arg1, 0, 0, 0, 0)
    accumulator, at = 0, 0
    while True:
        code, jt, jf, k = program[at]
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            accumulator = struct.unpack_from("<I", data, k)[0]
        elif code == 0x54:  # BPF_ALU | BPF_AND | BPF_K
            accumulator &= k
        elif code == 0x15:  # BPF_JMP | BPF_JEQ | BPF_K
            at += jt if accumulator == k else jf
        elif code == 0x06:  # BPF_RET | BPF_K
            return k
        else:
            raise AssertionError(f"instruction {code:#x} the kernel would refuse here")
        at += 1


@pytest.mark.parametrize("machine", sorted(ABIS))
def test_the_keyring_calls_and_fscrypt_keys_of_every_abi_are_refused_and_nothing_else(
    machine: str,
) -> None:
    abis = ABIS[machine]
    program = keyring_filter(abis)
    assert len(program) < 64 and all(0 <= jt < 256 and 0 <= jf < 256 for _, jt, jf, _ in program)
    for abi in abis:
        for nr in abi.keyring:
            assert _run(program, nr, abi.arch) == EPERM, (abi, nr)
            assert _run(program, 0x40000000 | nr, abi.arch) == EPERM, (abi, nr)  # x32's bit
        for nr in abi.ioctl:
            assert _run(program, nr, abi.arch, ADD_KEY) == EPERM, (abi, nr)
            # The kernel reads the command's low 32 bits: high ones change nothing.
            assert _run(program, nr, abi.arch, (1 << 40) | ADD_KEY) == EPERM, (abi, nr)
            for other in (0, 0x5401, ADD_KEY + 1, 0xC0406618):  # TCGETS, REMOVE_..._KEY
                assert _run(program, nr, abi.arch, other) == ALLOW, (abi, nr, other)
        # Every other call of the ABI, with that command too (another ABI's keyring
        # numbers among them: i386's 286 is another call on x86_64).
        for nr in set(range(600)) - set(abi.keyring) - set(abi.ioctl):
            assert _run(program, nr, abi.arch, ADD_KEY) == ALLOW, (abi, nr)
    for abi in abis:  # an architecture the program does not know
        for nr in (*abi.keyring, *abi.ioctl):
            assert _run(program, nr, 0xDEADBEEF, ADD_KEY) == ALLOW
