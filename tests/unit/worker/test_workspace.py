"""A delivery's folder: where it is made (on ext4, spread out) and how it is handed on."""

from __future__ import annotations

import array
import fcntl
import os
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.errors import SetupError
from core.evaluation.credentials import RunAs
from core.matrix import Scenario, Tier
from tests.support.trees import nest
from worker import graders_site
from worker.workspace import (
    RunDir,
    clear_dead_deliveries,
    git_identity,
    keep_spares,
    prepare,
    put_away,
    run_setup,
    spread_out,
    with_tests,
)

# linux/fs.h, read here independently of the code under test.
FS_IOC_GETFLAGS, FS_TOPDIR_FL = 0x80086601, 0x00020000
FS_IOC_GETVERSION, FS_IOC_SETVERSION = 0x80087601, 0x40087602


def _flags(folder: Path) -> int:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        got = array.array("i", [0])
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, got)
        return got[0]
    finally:
        os.close(fd)


def _ext(folder: Path) -> bool:
    """Whether `folder` is on ext2/3/4, by coreutils' stat (statvfs has no type)."""
    kind = subprocess.run(["stat", "-f", "-c", "%T", folder], capture_output=True, text=True)
    return kind.stdout.startswith("ext")


@pytest.mark.parametrize("place", ["tmp", "shm"])
def test_the_work_folder_is_marked_as_the_top_of_unrelated_trees_where_it_can_be(
    place: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if place == "shm":  # tmpfs: no inode flags, and a run is prepared all the same
        shm = Path("/dev/shm")
        assert shm.is_dir(), "this machine has no /dev/shm"
        base = Path(os.path.realpath(shm)) / f"evalfleet-test-{os.getpid()}-{tmp_path.name}"
    else:
        base = tmp_path / "runs"
    monkeypatch.setenv("EVALFLEET_WORKDIR", str(base))
    try:
        run_dir = prepare("exp:T0:s0:0", Tier(id="T0"), Scenario(id="s0", prompt="go"), "go")
        assert run_dir.prompt_file.read_text() == "go" and run_dir.workspace.is_dir()
        if _ext(base):
            assert _flags(base) & FS_TOPDIR_FL, f"{base} was not marked"
        else:  # tmpfs keeps no such flag: nothing to mark, nothing refused
            assert spread_out(str(base)) is False
        run_dir.remove()
        run_dir.release()
        assert not run_dir.root.exists()
    finally:
        if place == "shm":
            shutil.rmtree(base, ignore_errors=True)


def test_a_folder_that_is_not_there_is_left_unmarked(tmp_path: Path) -> None:
    assert spread_out(str(tmp_path / "absent")) is False


@pytest.fixture
def spares(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A work folder of the test's own, in which deliveries leave their folder to the
    next as a pool process's do."""
    base = tmp_path / "runs"
    monkeypatch.setenv("EVALFLEET_WORKDIR", str(base))
    keep_spares(True)
    try:
        yield base
    finally:
        keep_spares(False)


def _prepared(run_id: str, prompt: str = "go", env: dict[str, str] | None = None) -> RunDir:
    """A run's folder as its delivery makes it: prepared, then its environment's files
    (worker.run.agent_env writes its git identity)."""
    run_dir = prepare(run_id, Tier(id="T0"), Scenario(id="s0", prompt=prompt), prompt)
    assert git_identity(run_dir, env or {}) == {"GIT_CONFIG_SYSTEM": str(run_dir.git_config)}
    return run_dir


def test_a_run_users_delivery_leaves_its_emptied_folder_to_the_next(spares: Path) -> None:
    first = _prepared("exp:T0:s0:0", "first prompt")
    _as_the_agent_leaves_it(first)
    (first.workspace / "work.txt").write_text("the agent's")
    (first.home / ".tmp" / "scratch").write_text("the agent's")
    first.events_file.write_text('{"type": "note"}\n')
    (first.root / "tests").mkdir()  # a task's tests, copied in after the agent
    # As for an agent run as a user of its own (here this test's: chown to oneself).
    own = RunAs(os.getuid(), os.getgid())
    graders = with_tests(first, Scenario(id="s0", prompt="go"), {}, own)
    site = first.graders_python / "sitecustomize.py"
    folder, prompt = first.root.stat().st_ino, first.prompt_file.stat().st_ino
    identity, python = first.git_config.stat().st_ino, site.stat().st_ino
    put_away(first, own_user=True)

    # Kept locked under a name of its own (none of the run's is left), holding only its
    # prompt, its git identity and the graders' sitecustomize, which are root's.
    assert not first.root.exists() and not first.lock_file.exists()
    (spare,) = (p for p in spares.iterdir() if p.is_dir())
    assert spare.name.startswith(f"spare-{os.getpid()}-")
    assert sorted(p.name for p in spare.iterdir()) == ["gitconfig", "graders-python", "prompt.txt"]
    assert _lockable(spare.with_name(f"{spare.name}.lock")) is False

    # Shorter: the prompt is written over the first's, and so is the identity, which
    # leaves its email to the run's EMAIL (git takes that only where no config has one).
    second = _prepared("exp:T0:s0:1", "next", env={"EMAIL": "bot@example.org"})
    assert (second.root.stat().st_ino, second.prompt_file.stat().st_ino) == (folder, prompt)
    assert second.git_config.stat().st_ino == identity
    assert b"name = evalfleet agent" in second.git_config.read_bytes()
    assert b"email" not in second.git_config.read_bytes()
    assert not spare.exists()
    assert sorted(p.name for p in spares.iterdir()) == [second.root.name, second.lock_file.name]
    assert _lockable(second.lock_file) is False
    assert second.prompt_file.read_text() == "next"
    kept = ["gitconfig", "graders-python", "prompt.txt", "workspace"]
    assert sorted(p.name for p in second.root.iterdir()) == kept
    assert not any(second.workspace.iterdir())
    # The graders' home made anew, their sitecustomize the one the first run's had.
    os.utime(
        second.graders_python / "sitecustomize.py", ns=(1, 1)
    )  # the first run's gates read it at a time of their own
    again = with_tests(second, Scenario(id="s0", prompt="go"), {}, own)
    assert again["PYTHONPATH"] == graders["PYTHONPATH"].replace(first.root.name, second.root.name)
    assert (second.graders_python / "sitecustomize.py").stat().st_ino == python
    assert abs((second.graders_python / "sitecustomize.py").stat().st_atime - time.time()) < 60
    assert (second.graders_python / "sitecustomize.py").read_bytes() == Path(
        graders_site.__file__
    ).read_bytes()
    assert not any(second.graders_home.iterdir())
    # An agent run as the worker's user could have made it: written anew then.
    with_tests(second, Scenario(id="s0", prompt="go"), {}, None)
    assert (second.graders_python / "sitecustomize.py").stat().st_ino != python
    put_away(second, own_user=True)

    keep_spares(False)  # the pool process leaves: its spare goes with it
    assert not any(spares.iterdir())


def _as_the_agent_leaves_it(run_dir: RunDir) -> None:
    """The run's folder as its agent's environment made it (worker.run.agent_env)."""
    (run_dir.home / ".tmp").mkdir(parents=True, exist_ok=True)
    run_dir.events_file.touch()


def test_what_the_agent_owned_is_made_anew_whatever_it_marked(spares: Path) -> None:
    # An agent owns its workspace, its home and its events file while it runs: an ACL
    # or another attribute, a time, a generation number or a second name set on them
    # would reach the next run of this process if they were handed on.
    first = _prepared("exp:T0:s0:0")
    _as_the_agent_leaves_it(first)
    os.setxattr(first.workspace, "user.planted", b"1")
    first.events_file.write_text("the first run's")
    outside = spares.parent / "events-link"
    os.link(first.events_file, outside)
    os.chmod(first.home, 0o777)
    os.utime(first.home, ns=(1, 4242424242424242424))
    _set_generation(first.workspace, 123456789)
    put_away(first, own_user=True)

    second = _prepared("exp:T0:s0:1")
    _as_the_agent_leaves_it(second)
    assert os.listxattr(second.workspace) == []
    assert second.home.stat().st_mode & 0o777 != 0o777
    assert abs(second.home.stat().st_mtime - time.time()) < 60
    assert _generation(second.workspace) != 123456789
    second.events_file.write_text("the second run's")
    assert outside.read_text() == "the first run's"  # the link keeps the first run's file
    put_away(second, own_user=True)


def test_when_the_last_agent_read_its_prompt_does_not_reach_the_next(spares: Path) -> None:
    # The prompt is root's and handed on; an agent's read of it sets its access time,
    # at a moment the agent chose (a value here, as root, for the read).
    first = _prepared("exp:T0:s0:0")
    written = first.prompt_file.stat().st_mtime_ns
    marked = written + 123_456_789
    os.utime(first.prompt_file, ns=(marked, written))
    put_away(first, own_user=True)

    second = _prepared("exp:T0:s0:1")
    times = second.prompt_file.stat()
    assert times.st_atime_ns != marked and times.st_atime_ns == times.st_mtime_ns
    put_away(second, own_user=True)


def _set_generation(folder: Path, value: int) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, FS_IOC_SETVERSION, struct.pack("l", value))
    except OSError:  # a filesystem without generation numbers: nothing to carry
        pass
    finally:
        os.close(fd)


def _generation(folder: Path) -> int | None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return int(struct.unpack("l", fcntl.ioctl(fd, FS_IOC_GETVERSION, bytes(8)))[0])
    except OSError:
        return None
    finally:
        os.close(fd)


def test_a_tree_nested_past_pythons_recursion_is_deleted(spares: Path) -> None:
    # An agent's 3,000 nested folders: Python's rmtree recurses a level at a time and
    # gave up, leaving a folder that failed every later run on the work folder.
    run_dir = _prepared("exp:T0:s0:0")
    nest(run_dir.workspace)
    try:
        put_away(run_dir, own_user=True)
        (spare,) = (p for p in spares.iterdir() if p.is_dir())
        assert sorted(p.name for p in spare.iterdir()) == ["gitconfig", "prompt.txt"]
        keep_spares(False)
        assert not any(spares.iterdir())
    finally:  # pytest's own cleanup of its temporary folders could not delete the tree
        subprocess.run(["rm", "-rf", str(spares)], check=False)


def test_a_folder_whose_agent_ran_as_the_workers_user_is_deleted(spares: Path) -> None:
    # That agent owned what the folder is made of: nothing of it is handed on.
    first = _prepared("exp:T0:s0:0")
    put_away(first, own_user=False)
    assert not any(spares.iterdir())
    second = _prepared("exp:T0:s0:1")
    assert second.root.is_dir() and _lockable(first.lock_file) is None
    second.remove()
    second.release()


def test_the_spare_of_a_process_that_died_is_cleared_as_a_dead_delivery(spares: Path) -> None:
    pid = os.fork()
    if pid == 0:  # a pool process that runs one delivery and is killed
        try:
            put_away(_prepared("exp:T0:s0:0"), own_user=True)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    (left,) = (p for p in spares.iterdir() if p.is_dir())
    assert left.name.startswith(f"spare-{pid}-")
    assert clear_dead_deliveries() == []  # cleared, and not told as a delivery's leftovers
    assert not any(spares.iterdir())


def _lockable(lock_file: Path) -> bool | None:
    """Whether nobody holds the lock (None: no such file)."""
    try:
        fd = os.open(lock_file, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_a_git_system_config_the_run_chose_is_kept(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    for chosen in ({"GIT_CONFIG_SYSTEM": "/etc/team.gitconfig"}, {"GIT_CONFIG_NOSYSTEM": "1"}):
        assert git_identity(run_dir, chosen) == {}
    # Written all the same, for a container to mount: it decides by its image's variables.
    assert b"email = agent@evalfleet.invalid" in run_dir.git_config.read_bytes()


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("false", "exit code 1"),  # was "exit code 1: ", the colon dangling
        ("echo ' ' >&2; exit 4", "exit code 4"),
        ("echo missing.h >&2; echo building; exit 2", "exit code 2: missing.h"),
        ("echo 'make: *** [all] Error 1'; exit 2", "exit code 2: make: *** [all] Error 1"),
    ],
)
def test_a_failed_setup_says_its_exit_code_and_what_it_printed_if_anything(
    tmp_path: Path, command: str, why: str
) -> None:
    run_dir = RunDir(tmp_path)
    run_dir.workspace.mkdir()
    with pytest.raises(SetupError) as failed:
        run_setup(run_dir, Scenario(id="s0", prompt="go", setup=[command]), dict(os.environ))
    assert str(failed.value) == f"setup command {command!r} failed: {why}"


def test_what_the_agent_put_in_place_of_its_records_is_not_read(tmp_path: Path) -> None:
    """The worker reads the events file and a CLI's session record as root: a link to a
    file the run's user may not read (kept as evidence), a FIFO (it would wait for a
    writer) or a link to a device that never ends (/dev/zero) is read as no record;
    a record of its own is read, bounded."""
    from core.matrix.presets import PRESETS

    secret = tmp_path / "root-only"
    secret.write_text("the worker's secret\n")
    secret.chmod(0o600)
    claude = PRESETS["claude-code"]
    run_dir = RunDir(tmp_path / "run")
    sessions = run_dir.home / ".claude" / "projects" / "p"
    sessions.mkdir(parents=True)
    for placed in ("link", "fifo", "zero"):
        for path in (run_dir.events_file, sessions / "s.jsonl"):
            path.unlink(missing_ok=True)
            if placed == "link":
                path.symlink_to(secret)
            elif placed == "fifo":
                os.mkfifo(path)
            else:
                path.symlink_to("/dev/zero")
        assert run_dir.events(1000) is None, placed
        assert run_dir.session_text(claude) is None, placed
    for path in (run_dir.events_file, sessions / "s.jsonl"):
        path.unlink()
        path.write_text('{"type": "llm_call"}\n' * 1000)
    events = run_dir.events(1000)
    assert events is not None and len(events.head) + len(events.tail) == 1000 and events.dropped
    assert (run_dir.session_text(claude) or "").startswith('{"type": "llm_call"}\n')


def test_a_rescores_folder_left_by_a_process_that_died_is_swept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rescore gates in a folder of the work folder, locked as a delivery's: a worker
    killed meanwhile (SIGKILL: nothing of it runs again) leaves it, and the next sweep
    deletes it, as a dead delivery's; one whose process lives is left alone."""
    base = tmp_path / "work"
    base.mkdir()
    monkeypatch.setenv("EVALFLEET_WORKDIR", str(base))
    make = (
        "import os, sys, tempfile; from pathlib import Path; from worker.workspace import locked;"
        "d = locked(Path(tempfile.mkdtemp(prefix='rescore-', dir=sys.argv[1])));"
        "(d.root / 'workspace').mkdir(); print(d.root, flush=True); sys.stdin.read();"
        "os._exit(0)"
    )
    kept = subprocess.Popen(
        [sys.executable, "-c", make, str(base)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])},
    )  # fmt: skip
    dies = subprocess.Popen(
        [sys.executable, "-c", make, str(base)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])},
    )  # fmt: skip
    assert kept.stdout is not None and dies.stdout is not None
    alive, dead = Path(kept.stdout.readline().strip()), Path(dies.stdout.readline().strip())
    dies.kill()
    dies.wait()
    try:
        assert clear_dead_deliveries() == [dead.name]
        assert not dead.exists() and alive.is_dir()
    finally:
        kept.communicate("")
