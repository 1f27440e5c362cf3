"""`sandbox: bwrap`: a command agent inside bubblewrap.

The agent sees the host's file system read-only, a private /tmp and /dev, no
network (a fresh network namespace with only loopback), its own PID, IPC and
UTS namespaces, and only its workspace, its events file and its own home
writable, its prompt file readable. The work folder (other deliveries) and the
experiment's hidden files (worker.confinement) are masked. bwrap dies with its
parent, and the run's process-group kill reaches the jail too. Setup commands
and gates are the matrix author's and run outside it.

bubblewrap comes from the distribution (`apt-get install bubblewrap`); it needs
unprivileged user namespaces or root. A worker without it records the run as an
infrastructure error rather than running the agent unconfined.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from core.errors import SetupError
from worker.workspace import RunDir, work_root


def bwrap_argv(run_dir: RunDir, files: Path | None, hidden: Sequence[Path] = ()) -> list[str]:
    """The argv prefix that runs `bash -c COMMAND` in the sandbox; raises SetupError.
    `files`: the experiment's folder (worker.files), shown read-only wherever it is;
    `hidden`: its paths masked."""
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
    prompt = str(run_dir.prompt_file)
    prompt_bind = ["--ro-bind", prompt, prompt] if run_dir.prompt_file.is_file() else []
    shown = ["--ro-bind", str(files), str(files)] if files is not None else []
    masks = []
    for path in hidden:
        if path.is_dir():
            masks += ["--tmpfs", str(path)]
        elif path.exists():
            masks += ["--ro-bind", "/dev/null", str(path)]
    return [
        binary,
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
        # Over the /tmp tmpfs and the masked work folder: the experiment's and the
        # run's own files show through them wherever they are.
        "--tmpfs", str(work_root()),
        *shown,
        *masks,
        "--bind", workspace, workspace,
        "--bind", events, events,
        *prompt_bind,
        *home,
        "--unshare-all",
        "--die-with-parent",
        "--chdir", workspace,
    ]  # fmt: skip
