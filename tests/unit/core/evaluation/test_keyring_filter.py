"""The seccomp program that refuses the keyring calls (core.evaluation.credentials),
run by a small classic-BPF interpreter for every machine it is built for: on this
machine only its own architecture can be tried live (test_credentials)."""

from __future__ import annotations

import struct

import pytest

from core.evaluation.credentials import _KEYRING_CALLS, _keyring_filter

ALLOW, EPERM = 0x7FFF0000, 0x00050001


def _run(program: list[tuple[int, int, int, int]], nr: int, arch: int) -> int:
    """What the program returns for a call (nr, arch): the instructions it uses, as the
    kernel's classic BPF runs them over struct seccomp_data."""
    data = struct.pack("<iI", nr, arch) + bytes(56)
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


@pytest.mark.parametrize("machine", sorted(_KEYRING_CALLS))
def test_the_keyring_calls_of_every_abi_are_refused_and_nothing_else(machine: str) -> None:
    calls = _KEYRING_CALLS[machine]
    program = _keyring_filter(calls)
    assert len(program) < 64 and all(0 <= jt < 256 and 0 <= jf < 256 for _, jt, jf, _ in program)
    every_number = {n for numbers in calls.values() for n in numbers}
    for arch, numbers in calls.items():
        for nr in numbers:
            assert _run(program, nr, arch) == EPERM, (arch, nr)
            assert _run(program, 0x40000000 | nr, arch) == EPERM, (arch, nr)  # x32's bit
        # Every other call of the architecture, the others' keyring numbers included
        # (i386's 286 is another call on x86_64).
        for nr in set(range(512)) - set(numbers):
            assert _run(program, nr, arch) == ALLOW, (arch, nr)
    for nr in every_number:
        assert _run(program, nr, 0xDEADBEEF) == ALLOW  # an architecture it does not know
