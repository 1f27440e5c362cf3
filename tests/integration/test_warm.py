"""The warm process (scheduler.warm), through the real console script: a command run
cold leaves one; the next is forked from it, its local workers too, with the same
results, output, exit status and Ctrl-C; a changed module or another interpreter's
settings are never served by it; only its user reaches it, an agent not at all.

Each test has its own runtime folder (XDG_RUNTIME_DIR) and stops what it started.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SCHEDULER, shared_with_agents
from tests.support.fleet import a_run_under_way, alive, wait_until

pytestmark = pytest.mark.integration

FORKED = "cli: forked by the warm process"


@pytest.fixture
def warm_env(fleet_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """The embedded mode's environment with warm processes on, in a runtime folder of
    the test's own (short: a socket's path has at most 107 bytes); every warm process
    started in it is stopped after the test."""
    runtime = Path(tempfile.mkdtemp(prefix="efw-"))
    env = {k: v for k, v in fleet_env.items() if k not in ("EVALFLEET_BROKER_URL", "CI")}
    env.update(EVALFLEET_WARM="1", XDG_RUNTIME_DIR=str(runtime), EVALFLEET_WARM_IDLE_S="120")
    yield env
    stopped = _cli("warm", "--stop", "--all", env=env, cwd=runtime)
    wait_until(
        lambda: not list(runtime.glob("*/*.sock")),
        f"the warm processes to leave ({stopped.stdout.strip()})",
    )
    shutil.rmtree(runtime)


def _cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCHEDULER, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def _warm_pid(env: dict[str, str], cwd: Path) -> int:
    """The pid of the warm process that serves this environment, once it answers."""

    def serving() -> int | None:
        lines = _cli("warm", env=env, cwd=cwd).stdout.splitlines()
        return next((int(line.split()[1]) for line in lines if "(this Python's)" in line), None)

    return wait_until(serving, "a warm process to answer")


def _matrix(folder: Path, agent: str) -> Path:
    """Two scenarios: the agent's file makes one pass and the other fail."""
    matrix = folder / "matrix.yaml"
    matrix.write_text(
        "name: warm\nruns_per_tier: 2\n"
        f"agent: {{kind: command, command: {agent!r}, timeout_s: 60}}\n"
        "tiers: [{id: T0}]\n"
        "scenarios:\n"
        "  - {id: made, prompt: go, evaluation: {gates: [{type: file_exists, path: out.txt}]}}\n"
        "  - {id: missing, prompt: go, evaluation: {gates: [{type: file_exists, path: no.txt}]}}\n"
    )
    return matrix


def _outcomes(env: dict[str, str], cwd: Path) -> dict[str, list[bool]]:
    """Each scenario's runs' verdicts in the latest experiment's report."""
    report = _cli("report", "--format", "json", "--runs", env=env, cwd=cwd)
    runs = json.loads(report.stdout)["runs"]
    seen: dict[str, list[bool]] = {}
    for run in sorted(runs, key=lambda r: r["run_id"]):
        seen.setdefault(run["scenario"], []).append(run["passed"])
    return seen


def _untimed(line: str) -> str:
    """A progress line without its elapsed time and ETA, the parts a slow second moves."""
    return re.sub(r"\d+:\d\d:\d\d", "H:MM:SS", line)


def _left_in(folder: Path) -> list[int]:
    """Processes whose working folder is `folder`: a command, its workers, its Redis."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and Path(os.readlink(proc / "cwd")) == folder:
                found.append(int(proc.name))
        except OSError:  # gone meanwhile
            continue
    return found


def test_the_command_after_a_cold_one_runs_warm_with_the_same_results(
    warm_env: dict[str, str], tmp_path: Path
) -> None:
    seen = shared_with_agents(tmp_path / "parent")
    matrix = _matrix(tmp_path, f"echo ok > out.txt; tr '\\0' ' ' < /proc/$PPID/cmdline > {seen}")
    timeline = tmp_path / "timeline"
    env = {**warm_env, "EVALFLEET_TIMELINE": str(timeline), "EVALFLEET_TEST_SECRET": "s3cret"}
    cold = _cli("submit", str(matrix), env=env, cwd=tmp_path)
    assert cold.returncode == 0, cold.stderr
    cold_outcomes = _outcomes(env, tmp_path)
    assert FORKED not in timeline.read_text()
    assert "-m worker --standby" in seen.read_text()  # the cold path's worker
    pid = _warm_pid(warm_env, tmp_path)
    # Its environment is its key's: none of the command's secrets.
    assert b"s3cret" not in Path(f"/proc/{pid}/environ").read_bytes()
    timeline.unlink()
    warm = _cli("submit", str(matrix), env=env, cwd=tmp_path)
    assert warm.returncode == 0, warm.stderr
    assert FORKED in timeline.read_text()
    assert "worker: forked by the warm process" in timeline.read_text()
    assert "scheduler.warm_server" in seen.read_text()  # the agent's worker: a fork of it
    # Its progress, as the cold one drew it; only the clock may differ by a second.
    assert _untimed(warm.stderr.splitlines()[-1]) == _untimed(cold.stderr.splitlines()[-1])
    assert _outcomes(env, tmp_path) == cold_outcomes
    assert cold_outcomes == {"made": [True, True], "missing": [False, False]}
    # Its errors as a cold command's: the file and the line named, exit 2.
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nruns_per_tier: many\n")
    refused = _cli("validate", str(bad), env=env, cwd=tmp_path)
    assert refused.returncode == 2
    assert "bad.yaml:2:16: runs_per_tier" in refused.stderr
    assert _left_in(tmp_path) == []


def test_ctrl_c_reaches_the_command_the_warm_process_runs(
    warm_env: dict[str, str], tmp_path: Path
) -> None:
    """Ctrl-C of the console script reaches the command forked for it: exit 130 with
    what to do next, its Redis and its workers stopped."""
    proc, state = _a_warm_submit_under_way(warm_env, tmp_path)
    redis_pid = json.loads(state.read_text())["pid"]
    assert len(_left_in(tmp_path)) >= 3  # the command, its worker and pool, its Redis
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "scheduler resume" in stderr and "scheduler cancel" in stderr
    assert not alive(redis_pid)
    wait_until(lambda: _left_in(tmp_path) == [], "the command's processes to end", timeout=30)


def _a_warm_submit_under_way(
    env: dict[str, str], folder: Path
) -> tuple[subprocess.Popen[str], Path]:
    """A submit of runs that sleep, forked by a warm process, once a run is under way;
    with its embedded Redis's state file."""
    (folder / "first").mkdir()
    first = _cli("validate", str(_matrix(folder / "first", "true")), env=env, cwd=folder)
    assert first.returncode == 0, first.stderr
    _warm_pid(env, folder)
    # A process group of its own, as a shell's job has, whose parent (this test) is in
    # another group of the session: the kernel discards a stop (Ctrl-Z) sent to an
    # orphaned group, as the test's own would be when pytest's parent has left.
    proc = subprocess.Popen(
        [SCHEDULER, "submit", str(_matrix(folder, "sleep 60")), "--workers", "1"],
        env=env,
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        process_group=0,
    )
    state = folder / ".evalfleet" / "redis.json"
    wait_until(lambda: a_run_under_way(state), "a run under way")
    return proc, state


def test_a_changed_module_is_never_run_warm(warm_env: dict[str, str], tmp_path: Path) -> None:
    """A package installed on sys.path after the warm process started (its folder
    changed): the next command runs cold, the stale process leaves, a new one starts."""
    site = tmp_path / "site-packages"
    site.mkdir()
    env = {**warm_env, "PYTHONPATH": f"{warm_env.get('PYTHONPATH', '')}:{site}".strip(":")}
    timeline = tmp_path / "timeline"
    env["EVALFLEET_TIMELINE"] = str(timeline)
    matrix = _matrix(tmp_path, "echo ok > out.txt")
    assert _cli("validate", str(matrix), env=env, cwd=tmp_path).returncode == 0
    stale = _warm_pid(env, tmp_path)
    (site / "newly_installed.py").write_text("")
    timeline.unlink()
    again = _cli("validate", str(matrix), env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert FORKED not in timeline.read_text()
    wait_until(lambda: not alive(stale), "the stale warm process to leave")
    assert _warm_pid(env, tmp_path) != stale


def test_another_pythons_settings_are_not_served_by_it(
    warm_env: dict[str, str], tmp_path: Path
) -> None:
    """A variable read as Python starts (PYTHONHASHSEED here) is part of the key: a
    command with another value gets a warm process of its own."""
    matrix = _matrix(tmp_path, "true")
    one = {**warm_env, "PYTHONHASHSEED": "1"}
    two = {**warm_env, "PYTHONHASHSEED": "2"}
    assert _cli("validate", str(matrix), env=one, cwd=tmp_path).returncode == 0
    first = _warm_pid(one, tmp_path)
    timeline = tmp_path / "timeline"
    checked = _cli(
        "validate", str(matrix), env={**two, "EVALFLEET_TIMELINE": str(timeline)}, cwd=tmp_path
    )
    assert checked.returncode == 0
    assert FORKED not in timeline.read_text()
    assert _warm_pid(two, tmp_path) != first
    listed = _cli("warm", env=one, cwd=tmp_path).stdout
    assert "this Python's" in listed and "another Python's or settings'" in listed


def test_a_runtime_folder_not_the_users_alone_runs_nothing_warm(
    warm_env: dict[str, str], tmp_path: Path
) -> None:
    place = Path(warm_env["XDG_RUNTIME_DIR"]) / f"evalfleet-warm-{os.getuid()}"
    place.mkdir(mode=0o755)
    place.chmod(0o755)  # others may enter: a socket there is not the user's alone
    matrix = _matrix(tmp_path, "true")
    assert _cli("validate", str(matrix), env=warm_env, cwd=tmp_path).returncode == 0
    time.sleep(3)  # a warm process would have bound its socket by now
    assert list(place.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: other users are made to connect")
def test_another_user_is_refused_even_where_the_socket_is_open_to_it(
    warm_env: dict[str, str], tmp_path: Path
) -> None:
    """The folder's mode keeps other users out; were it and the socket opened to all,
    the warm process would still serve only its own user (SO_PEERCRED)."""
    assert (
        _cli("validate", str(_matrix(tmp_path, "true")), env=warm_env, cwd=tmp_path).returncode == 0
    )
    _warm_pid(warm_env, tmp_path)
    (sock,) = Path(warm_env["XDG_RUNTIME_DIR"]).glob("*/*.sock")
    nobody = pwd.getpwnam("nobody").pw_uid
    assert _as_user(nobody, sock) == "PermissionError"  # the folder is 0700
    sock.parent.chmod(0o711)
    sock.parent.parent.chmod(0o711)
    sock.chmod(0o666)
    try:
        assert _as_user(nobody, sock) == "closed unanswered"
    finally:  # this user's alone again, or `scheduler warm --stop` would not look in it
        sock.parent.chmod(0o700)


def _as_user(uid: int, sock: Path) -> str:
    """What a process of user `uid` gets asking the warm process at `sock` to run a
    command."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        outcome = "served"
        try:
            os.setresuid(uid, uid, uid)
            conn = socket.socket(socket.AF_UNIX)
            conn.connect(str(sock))
            request = json.dumps({"kind": "cli", "argv": ["scheduler", "list"]}).encode()
            socket.send_fds(conn, [len(request).to_bytes(4, "big") + request], [0, 1, 2])
            conn.settimeout(10)
            if conn.recv(64) == b"":
                outcome = "closed unanswered"
        except (BrokenPipeError, ConnectionResetError):  # closed before it was asked
            outcome = "closed unanswered"
        except OSError as exc:
            outcome = type(exc).__name__
        os.write(write, outcome.encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as answer:
        return answer.read()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: agents run as users of their own")
def test_an_agent_cannot_reach_the_warm_process_that_forked_its_worker(
    warm_env: dict[str, str], tmp_path: Path
) -> None:
    """The agent of a warm command's run, a user of its own, tries to connect to the
    socket of the warm process its worker was forked from (to have it run a command
    as the user): refused."""
    assert (
        _cli("validate", str(_matrix(tmp_path, "true")), env=warm_env, cwd=tmp_path).returncode == 0
    )
    _warm_pid(warm_env, tmp_path)
    (sock,) = Path(warm_env["XDG_RUNTIME_DIR"]).glob("*/*.sock")
    seen = shared_with_agents(tmp_path / "reached")
    attempt = tmp_path / "attempt.py"
    attempt.write_text(
        "import socket\n"
        "try:\n"
        f"    socket.socket(socket.AF_UNIX).connect({str(sock)!r})\n"
        "    print('connected')\n"
        "except OSError as exc:\n"
        "    print(type(exc).__name__)\n"
    )
    attempt.chmod(0o644)
    matrix = _matrix(tmp_path, f"python3 {attempt} >> {seen}; echo ok > out.txt")
    timeline = tmp_path / "timeline"
    env = {**warm_env, "EVALFLEET_TIMELINE": str(timeline)}
    result = _cli("submit", str(matrix), env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert FORKED in timeline.read_text()
    assert seen.read_text().split() == ["PermissionError"] * 4


def test_a_password_on_the_command_line_is_never_left_showing_in_a_waiting_process(
    warm_env: dict[str, str], tmp_path: Path
) -> None:
    """A command run cold overwrites a broker password in its own /proc/PID/cmdline as it
    starts; the process that would wait on a warm command could not, so a command
    holding one runs cold. One without a password runs warm."""
    assert (
        _cli("validate", str(_matrix(tmp_path, "true")), env=warm_env, cwd=tmp_path).returncode == 0
    )
    _warm_pid(warm_env, tmp_path)
    timeline = tmp_path / "timeline"
    env = {**warm_env, "EVALFLEET_TIMELINE": str(timeline)}
    # Nothing answers there: what the command does with it does not matter here.
    for url, forked in (("redis://127.0.0.1:9/0", True), ("redis://:s3cret@127.0.0.1:9/0", False)):
        timeline.write_text("")
        listed = _cli("list", "--broker", url, env=env, cwd=tmp_path)
        assert (FORKED in timeline.read_text()) is forked, listed.stderr


def test_the_commands_that_serve_until_stopped_are_never_run_warm(
    warm_env: dict[str, str], tmp_path: Path
) -> None:
    """`scheduler worker` and `model-server` stay the process their supervisor started
    (its control group, its stop); a command that ends is forked warm."""
    assert (
        _cli("validate", str(_matrix(tmp_path, "true")), env=warm_env, cwd=tmp_path).returncode == 0
    )
    _warm_pid(warm_env, tmp_path)
    timeline = tmp_path / "timeline"
    env = {**warm_env, "EVALFLEET_TIMELINE": str(timeline)}
    for command, forked in (("list", True), ("worker", False), ("model-server", False)):
        timeline.write_text("")
        assert _cli(command, "--help", env=env, cwd=tmp_path).returncode == 0
        assert (FORKED in timeline.read_text()) is forked, command


def test_a_bad_idle_setting_is_said_and_starts_no_warm_process(
    warm_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**warm_env, "EVALFLEET_WARM_IDLE_S": "soon"}
    checked = _cli("validate", str(_matrix(tmp_path, "true")), env=env, cwd=tmp_path)
    assert checked.returncode == 0  # the command itself is not the setting's
    assert "EVALFLEET_WARM_IDLE_S='soon' is not a number of seconds above 0" in checked.stderr
    assert "no warm process was started" in checked.stderr
    time.sleep(3)  # one would have bound its socket by now
    assert not list(Path(warm_env["XDG_RUNTIME_DIR"]).glob("*/*.sock"))


def test_a_warm_process_still_starting_is_shown_and_stopped(
    warm_env: dict[str, str], tmp_path: Path
) -> None:
    """Right after the command that started it, the warm process is still importing and
    does not answer yet: `scheduler warm` shows it starting, and `--stop` stops it."""
    matrix = _matrix(tmp_path, "true")
    off = {**warm_env, "EVALFLEET_WARM": "0"}  # the commands that look start none
    assert _cli("validate", str(matrix), env=warm_env, cwd=tmp_path).returncode == 0
    shown = _cli("warm", env=off, cwd=tmp_path).stdout
    assert "(this Python's, starting)" in shown, shown
    pid = int(shown.split()[1])
    assert _cli("warm", "--stop", env=off, cwd=tmp_path).stdout.strip() == (
        f"stopped 1 warm process(es): pid {pid}"
    )
    wait_until(lambda: not alive(pid), "the starting warm process to leave")
    assert "no warm process" in _cli("warm", env=off, cwd=tmp_path).stdout


def test_ctrl_z_stops_the_warm_command_and_fg_continues_it(
    warm_env: dict[str, str], tmp_path: Path
) -> None:
    """The command is not in the shell's job: Ctrl-Z (SIGTSTP to the console script)
    stops it too, and `fg` (SIGCONT) continues both."""
    proc, state = _a_warm_submit_under_way(warm_env, tmp_path)
    command = _parent(json.loads(state.read_text())["pid"])  # the fork that started Redis
    assert command != proc.pid
    proc.send_signal(signal.SIGTSTP)
    wait_until(lambda: _state(proc.pid) == _state(command) == "T", "both to stop")
    proc.send_signal(signal.SIGCONT)
    wait_until(lambda: "T" not in (_state(proc.pid), _state(command)), "both to go on")
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _state(pid: int) -> str:
    return _stat(pid)[0]


def _parent(pid: int) -> int:
    return int(_stat(pid)[1])


def test_stop_stops_this_pythons_warm_process_and_all_every_one_of_this_users(
    warm_env: dict[str, str], tmp_path: Path
) -> None:
    """Another checkout's or venv's warm process is not this command's to stop unasked
    (a user's `--stop` once stopped another session's): `--stop` says it is left, and
    `--stop --all` stops it too."""
    matrix = _matrix(tmp_path, "true")
    other = {**warm_env, "TZ": "Pacific/Auckland"}  # other settings: a process of its own
    for env in (warm_env, other):
        assert _cli("validate", str(matrix), env=env, cwd=tmp_path).returncode == 0
    mine, theirs = _warm_pid(warm_env, tmp_path), _warm_pid(other, tmp_path)
    assert mine != theirs
    stopped = _cli("warm", "--stop", env=warm_env, cwd=tmp_path).stdout.splitlines()
    assert stopped == [
        f"stopped 1 warm process(es): pid {mine}",
        f"left 1 of another Python or settings running: pid {theirs}: "
        "`scheduler warm --stop --all` stops them too",
    ]
    wait_until(lambda: not alive(mine), "this Python's warm process to leave")
    assert alive(theirs)
    every = _cli("warm", "--stop", "--all", env=warm_env, cwd=tmp_path).stdout.strip()
    assert every == f"stopped 1 warm process(es): pid {theirs}"
    wait_until(lambda: not alive(theirs), "the other warm process to leave")
    refused = _cli("warm", "--all", env=warm_env, cwd=tmp_path)
    assert refused.returncode == 2 and "--all goes with --stop" in refused.stderr
