"""An interrupt is told apart from a failure however it surfaces."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable

import pytest

from scheduler.interrupt import interrupted


def _raised(make: Callable[[], object]) -> BaseException:
    try:
        make()
    except BaseException as exc:
        return exc
    raise AssertionError("nothing raised")


def _ctrl_c() -> None:
    raise KeyboardInterrupt


def _import_cut_short() -> None:
    # What pydantic's lazy module attributes do with a Ctrl-C during their import.
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt as exc:
        raise AttributeError("module has no attribute 'X'") from exc


def _failing_while_stopping() -> None:
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        raise OSError("clean-up failed")  # noqa: B904 - implicit chaining is the case


def _failure() -> None:
    try:
        raise ValueError("first")
    except ValueError as exc:
        raise RuntimeError("second") from exc


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (_ctrl_c, True),
        (_import_cut_short, True),
        (_failing_while_stopping, True),
        (_failure, False),
        (lambda: 1 / 0, False),
    ],
)
def test_an_interrupt_is_found_in_the_chain(make: Callable[[], object], expected: bool) -> None:
    assert interrupted(_raised(make)) is expected


def test_a_chain_that_loops_ends() -> None:
    first, second = ValueError("a"), ValueError("b")
    first.__cause__, second.__cause__ = second, first
    assert interrupted(first) is False


def test_once_an_interrupt_came_any_exception_is_one() -> None:
    """A Ctrl-C caught and replaced by another exception that names it only in its text,
    with no cause or context (pydantic's schema builder, in Rust): the process
    remembers it received one."""
    script = """
import os, signal
from scheduler.interrupt import catch, interrupted
print(interrupted(ValueError("before")))
catch(signal.SIGINT)
try:
    os.kill(os.getpid(), signal.SIGINT)
except KeyboardInterrupt:
    said = "KeyboardInterrupt"
print(interrupted(ValueError(f"SchemaError: ... {said}")))
"""
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert ran.stdout.split() == ["False", "True"]


def test_a_deferred_interrupt_lands_as_the_step_ends() -> None:
    """A Ctrl-C inside `deferred` lets the step finish (the standby process started and
    recorded, so that the CLI can stop it), then ends the command as an interrupt."""
    script = """
import os, signal
from scheduler.interrupt import catch, deferred
catch(signal.SIGINT)
steps = []
try:
    with deferred(signal.SIGINT):
        os.kill(os.getpid(), signal.SIGINT)
        steps.append("finished")
    steps.append("after")
except KeyboardInterrupt:
    steps.append("interrupted")
print(*steps)
print(signal.getsignal(signal.SIGINT).__name__)
"""
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert ran.stdout.splitlines() == ["finished interrupted", "_raise"]


def test_an_interrupt_python_dropped_is_raised_where_the_command_goes_on() -> None:
    """A Ctrl-C landing in a __del__ (or an import lock's weakref callback, where the
    Ctrl-C-at-any-moment test found one) is dropped by Python, with a traceback on
    stderr, and the command went on: it is kept, quietly, and raised at the next
    `raise_if_lost`; other unraisable errors are reported as before."""
    script = """
import gc, os, signal
from scheduler.interrupt import catch, raise_if_lost
catch(signal.SIGINT)

class Interrupted:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)

class Failing:
    def __del__(self):
        raise ValueError("reported")

Interrupted()
gc.collect()
print("went on")
raise_if_lost()
"""
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert ran.stdout.splitlines() == ["went on"]
    # Python ends on an uncaught KeyboardInterrupt as killed by SIGINT.
    assert ran.returncode == -signal.SIGINT and ran.stderr.rstrip().endswith("KeyboardInterrupt")
    assert "Exception ignored" not in ran.stderr
    again = script.replace("raise_if_lost()\n", "Failing(); gc.collect(); raise_if_lost()\n")
    ran = subprocess.run([sys.executable, "-c", again], capture_output=True, text=True)
    assert "Exception ignored" in ran.stderr and "ValueError: reported" in ran.stderr
    assert ran.returncode == -signal.SIGINT
