"""`sandbox: bwrap`: a command agent inside bubblewrap.

The agent sees the host's file system read-only, a private /tmp and /dev, no
network (a fresh network namespace with only loopback), its own PID, IPC and
UTS namespaces, and only its workspace, its events file and (a preset's CLI) its
own home writable. bwrap dies with its parent, and the run's process-group kill
reaches the jail too. Setup commands and gates are the matrix author's and run unsandboxed.

bubblewrap comes from the distribution (`apt-get install bubblewrap`); it needs
unprivileged user namespaces or root. A worker without it records the run as an
infrastructure error rather than running the agent unconfined.
"""

from __future__ import annotations

import shutil
from typing import Literal

from core.errors import SetupError
from worker.workspace import RunDir


def sandbox_argv(sandbox: Literal["none", "bwrap"], run_dir: RunDir) -> list[str]:
    """The argv prefix that runs `bash -c COMMAND` in the sandbox; raises SetupError."""
    if sandbox == "none":
        return []
    binary = shutil.which("bwrap")
    if binary is None:
        raise SetupError(
            "the agent asks for `sandbox: bwrap` but this worker has no bwrap; "
            "install bubblewrap (apt-get install bubblewrap)"
        )
    workspace, events = str(run_dir.workspace), str(run_dir.events_file)
    run_dir.events_file.touch()  # a bind mount needs the file to exist
    # The agent's own home (worker.workspace.own_home) is its to write.
    home = ["--bind", str(run_dir.home), str(run_dir.home)] if run_dir.home.is_dir() else []
    return [
        binary,
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
        # After the /tmp tmpfs: a work root under /tmp must show through it.
        "--bind", workspace, workspace,
        "--bind", events, events,
        *home,
        "--unshare-all",
        "--die-with-parent",
        "--chdir", workspace,
    ]  # fmt: skip
