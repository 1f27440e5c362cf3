"""Is a Docker engine here? The reason the engine tests skip, or None when one answers.

CI starts an engine where it can (.ci/docker-engine); elsewhere these tests skip
and say what is missing, never fail for it.
"""

from __future__ import annotations

import functools
import shutil
import subprocess


def _answers(*argv: str) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.cache
def engine_missing() -> str | None:
    if shutil.which("docker") is None:
        return "no docker CLI on PATH (CI installs one: .ci/docker-engine)"
    if not _answers("docker", "info"):
        return "no Docker engine answers `docker info` (CI starts one: .ci/docker-engine)"
    return None


@functools.cache
def compose_missing() -> str | None:
    if (reason := engine_missing()) is not None:
        return reason
    if not _answers("docker", "compose", "version"):
        return "no docker compose v2 plugin (CI installs one: .ci/docker-engine)"
    return None
