"""worker.nodes with real processes in a real terminal: what the parent of a split
worker's nodes passes on, and what it leaves to the terminal."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fleet.nodes import SPLITS
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(not SPLITS, reason="a start splits on Linux only")

# Each node records every SIGINT and SIGTERM it gets for a while: who sent it (the
# kernel, for a terminal's Ctrl-C; its parent, passing one on), then ends 0.
NODE = """
import json, os, signal, sys, time
from worker import nodes

out = sys.argv[1]
node = nodes.fork("t@host", 2)
if isinstance(node, nodes.Children):
    sys.exit(node.wait())
waited = {signal.SIGINT, signal.SIGTERM}
signal.pthread_sigmask(signal.SIG_BLOCK, waited)
open(os.path.join(out, node + ".ready"), "w").close()
got, deadline = [], time.monotonic() + 6
while (left := deadline - time.monotonic()) > 0:
    info = signal.sigtimedwait(waited, left)
    if info is not None:
        got.append([info.si_signo, info.si_code, info.si_pid == os.getppid()])
with open(os.path.join(out, node), "w") as f:
    json.dump(got, f)
"""
SI_USER, SI_KERNEL = 0, 0x80


def test_the_terminals_ctrl_c_is_not_passed_on_a_processs_signal_is(tmp_path: Path) -> None:
    """Ctrl-C reaches each node once, from the terminal: passed on as well, Celery took
    the second for a cold shutdown that drops the runs under way. A TERM sent to the
    parent alone (`kill PID`, LocalWorkers.stop) reaches each node from it."""
    pid, terminal = pty.fork()
    if pid == 0:
        os.chdir(ROOT)
        os.execv(sys.executable, [sys.executable, "-c", NODE, str(tmp_path)])
    try:
        _wait(lambda: len(list(tmp_path.glob("*.ready"))) == 2, terminal)
        os.write(terminal, b"\x03")  # SIGINT to the terminal's foreground group
        time.sleep(1)
        os.kill(pid, signal.SIGTERM)
        _wait(lambda: os.waitpid(pid, os.WNOHANG)[0] == pid, terminal, timeout=30)
    finally:
        os.close(terminal)
    for name in ("t.1@host", "t.2@host"):
        got = json.loads((tmp_path / name).read_text())
        assert got == [[signal.SIGINT, SI_KERNEL, False], [signal.SIGTERM, SI_USER, True]], got


def _wait(done: Callable[[], bool], terminal: int, timeout: float = 30) -> None:
    """Until `done()`, reading the terminal meanwhile (one nobody reads blocks its
    writers)."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        if select.select([terminal], [], [], 0.05)[0]:
            with contextlib.suppress(OSError):  # EIO: every process left the terminal
                os.read(terminal, 65536)


# The first node fails at once, the second is killed a moment later.
ENDINGS = """
import os, signal, sys, time
from worker import nodes

node = nodes.fork("t@host", 2)
if isinstance(node, nodes.Children):
    sys.exit(node.wait())
if node == "t.1@host":
    os._exit(3)
time.sleep(0.5)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_parent_says_which_node_ended_how_and_ends_with_the_first_failure() -> None:
    done = subprocess.run(
        [sys.executable, "-c", ENDINGS], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 3, done.stderr
    said = done.stderr.splitlines()
    assert said == [
        "worker node t.1@host ended with exit code 3; 1 go on",
        f"worker node t.2@host ended with exit code {128 + signal.SIGKILL}",
    ], said
