"""A run's private folder: the workspace the agent works in, plus its prompt and events.

Layout: ``<root>/<run>/workspace`` (template copy + tier files, the agent's cwd),
``<root>/<run>/prompt.txt`` and ``<root>/<run>/events.jsonl`` beside it, so the
files evalfleet hands the agent are not part of what the gates and judge inspect.

Nothing here reads or writes outside the run's folder: a template's symlinks
are copied as links (never followed), tier files are refused when their
destination resolves outside the workspace, and removal deletes only a real
folder directly under the work root.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from core.config import Scenario, Tier
from core.shell import Watch, run_shell


class SetupError(Exception):
    """The workspace could not be prepared: an infrastructure error, not the agent's."""


def work_root() -> Path:
    return Path(os.environ.get("EVALFLEET_WORKDIR") or Path(tempfile.gettempdir()) / "evalfleet")


@dataclass(frozen=True)
class RunDir:
    root: Path

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def prompt_file(self) -> Path:
        return self.root / "prompt.txt"

    @property
    def events_file(self) -> Path:
        return self.root / "events.jsonl"

    def events_text(self) -> str | None:
        try:
            return self.events_file.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return None

    def remove(self) -> None:
        # Only ever delete a real folder directly under the work root, whatever
        # the run id looked like or the agent turned the folder into (a symlink
        # to another run's folder is unlinked, not followed).
        if self.root.is_symlink():
            self.root.unlink()
        elif self.root.resolve().parent == work_root().resolve():
            shutil.rmtree(self.root, ignore_errors=True)


def prepare(run_id: str, tier: Tier, scenario: Scenario, prompt: str) -> RunDir:
    """Make a fresh run folder: template copy, tier files, prompt. Raises SetupError."""
    base = work_root()
    base.mkdir(parents=True, exist_ok=True)
    run_dir = RunDir(base / re.sub(r"[^A-Za-z0-9_.-]", "_", run_id))
    run_dir.remove()  # a redelivered run starts from scratch
    try:
        run_dir.root.mkdir()
        if scenario.workspace is not None:
            shutil.copytree(scenario.workspace, run_dir.workspace, symlinks=True)
        else:
            run_dir.workspace.mkdir()
        for dest, source in tier.files.items():
            target = _inside(run_dir.workspace, dest)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
        run_dir.prompt_file.write_text(prompt, encoding="utf-8")
    except OSError as exc:
        raise SetupError(f"preparing the workspace failed: {exc}") from exc
    return run_dir


def _inside(workspace: Path, dest: str) -> Path:
    """The tier file's destination; refused when a template symlink leads it outside."""
    target = workspace / dest
    root = workspace.resolve()
    if not target.resolve().is_relative_to(root):
        raise SetupError(
            f"tier file destination {dest!r} leads outside the workspace (through a symlink "
            "in the scenario's template); refused"
        )
    return target


def size_limit(workspace: Path, max_mb: float | None) -> Watch | None:
    """A watch that stops the agent once its workspace takes more than `max_mb` on disk."""
    if max_mb is None:
        return None
    limit = int(max_mb * 1024 * 1024)

    def over_limit() -> str | None:
        if disk_usage(workspace, stop_above=limit) > limit:
            return f"its workspace grew past {max_mb:g} MB (agent.max_workspace_mb)"
        return None

    return over_limit


def disk_usage(root: Path, stop_above: int) -> int:
    """Bytes allocated under `root` (symlinks not followed); counting ends past `stop_above`."""
    total = 0
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except OSError:  # deleted meanwhile
                continue
            if total > stop_above:
                return total
    return total


def run_setup(run_dir: RunDir, scenario: Scenario, env: Mapping[str, str]) -> None:
    for command in scenario.setup:
        result = run_shell(command, run_dir.workspace, timeout_s=scenario.setup_timeout_s, env=env)
        if not result.ok:
            why = (
                f"timed out after {scenario.setup_timeout_s:g} s"
                if result.timed_out
                else result.error or f"exit code {result.exit_code}: {result.stderr.strip()[-500:]}"
            )
            raise SetupError(f"setup command {command!r} failed: {why}")
