"""A secret overwritten where /proc shows a process's arguments and environment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

_HIDE = """
import os, sys
from fleet import procfs
procfs.forget("THE_SECRET")
procfs.mask_in_arguments("s3cr/et")
print("hidden" if "THE_SECRET" not in os.environ else "still in os.environ", flush=True)
sys.stdin.read()
"""


def test_the_secret_is_gone_from_cmdline_and_environ_the_rest_stays() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HIDE, "--broker", "redis://:s3cr%2Fet@h/0", "s3cr/et"],
        env={"THE_SECRET": "s3cr/et", "KEPT": "yes", "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"hidden\n"
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
    finally:
        proc.communicate(b"")
    assert cmdline[-4:-1] == [b"--broker", b"redis://:*********@h/0", b"*******"]
    assert b"s3cr" not in environ and b"KEPT=yes" in environ and b"THE_SECRET=\0" in environ
