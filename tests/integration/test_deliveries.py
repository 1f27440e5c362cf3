"""Two deliveries of one run on one machine, and processes that leave the agent's group.

A run can be delivered twice at once on one machine: Celery requeues the
message of a killed pool process while the run's lapsed lease sends it again,
a worker frozen past its lease resumes beside the copy sent in its place, a
`resume` re-sends what is still queued. Each delivery works in a folder of its
own, and only the live one's result is recorded (docs/RELIABILITY.md). The
agent here earns a known result: it passes if and only if its run index is
even, so a delivery that lost its workspace to another shows as a wrong result.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from core.evaluation.shell import PidMark, kill_groups_by_env, pid_mark
from core.matrix import Scenario, Tier
from core.results.run import RunStatus
from core.store import Store
from tests.conftest import QUEUE, StartWorker, Worker, run_cli, shared_with_agents, start_cli
from tests.support.experiments import command_matrix
from tests.support.fleet import alive, wait_until
from worker.workspace import MARKER, clear_dead_deliveries, folder_name, prepare

LEASE_S = 5


def agent(log: Path, sleep: str) -> str:
    """Logs `start|end RUN DELIVERY PID PPID TIME`; passes iff its run index is even."""
    line = f'"$EVALFLEET_RUN_ID $EVALFLEET_DELIVERY $$ $PPID $(date +%s.%N)" >> {log}'
    return (
        f"echo start {line}; {sleep}; "
        "if [ $((EVALFLEET_RUN_INDEX % 2)) = 0 ]; then touch out.txt; fi; "
        f"echo end {line}"
    )


def deliveries(log: Path, run_index: int) -> dict[str, dict[str, float]]:
    """Per delivery of the run with this index: its `start` and `end` times, `pid`, `ppid`."""
    found: dict[str, dict[str, float]] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        event, run_id, delivery, pid, ppid, at = line.split()
        if run_id.endswith(f":{run_index}"):
            entry = found.setdefault(delivery, {"pid": int(pid), "ppid": int(ppid)})
            entry[event] = float(at)
    return found


def overlapped(log: Path, run_index: int) -> bool:
    """Did two deliveries of the run have their agents running at the same time?"""
    spans = [(d["start"], d.get("end", float("inf"))) for d in deliveries(log, run_index).values()]
    return any(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(spans) for b in spans[i + 1 :])


def assert_each_run_earned(store: Store, exp_id: str, runs: int) -> None:
    """One result per run, each the one its agent earned: completed, passed iff even."""
    results = store.results.all(exp_id)
    assert sorted(r.run_index for r in results) == list(range(runs))
    for r in results:
        assert (r.status, r.passed) == (RunStatus.completed, r.run_index % 2 == 0), (
            r.run_id, r.status, r.passed, r.attempts, r.fail_reason,
        )  # fmt: skip
    info = store.experiments.info(exp_id)
    assert (info.completed_runs, info.passes) == (runs, (runs + 1) // 2)


@contextlib.contextmanager
def two_workers(env: dict[str, str], folder: Path, queues: str = QUEUE) -> Iterator[list[Worker]]:
    """Two workers of two slots each on this machine, sharing one work root, sweeping
    every second."""
    env = {**env, "EVALFLEET_SWEEP_S": "1"}
    workers: list[Worker] = []
    try:
        for name in ("a", "b"):
            workers.append(Worker(env, folder / f"{name}.log", queues=queues, name=name))
        yield workers
    finally:
        for worker in workers:
            worker.stop()


def submit(matrix: Path, env: dict[str, str]) -> str:
    submitted = run_cli("submit", str(matrix), env=env)
    assert submitted.returncode == 0, submitted.stderr
    return submitted.stdout.strip()


@pytest.fixture
def env(fleet_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The fleet's environment with a work root of this test's own, to check it empties."""
    return {**fleet_env, "EVALFLEET_WORKDIR": str(tmp_path / "runs")}


@pytest.mark.integration
def test_a_pool_process_killed_while_its_lease_sends_the_run_again_corrupts_nothing(
    env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    """Run 0's pool process is killed, its agent orphaned: Celery puts the run's
    message back, and that copy finds the lease still live and is dropped; once the
    lease lapses the sweep sends the run again, and the new delivery runs beside
    the dead one's orphan on this machine."""
    log = shared_with_agents(tmp_path / "agents.log")
    # Run 0's first delivery sleeps on, orphaned, until a later delivery clears it;
    # run 1 frees a slot for Celery's copy, and runs 2-4 one for the lease's, 4 s later.
    marks = shared_with_agents(tmp_path / "marks", folder=True)
    sleep = (
        f"if [ $EVALFLEET_RUN_INDEX = 0 ] && mkdir {marks}/first 2>/dev/null; then sleep 300; "
        "else case $EVALFLEET_RUN_INDEX in 0) sleep 8;; 1) sleep 12;; *) sleep 16;; esac; fi"
    )
    matrix = command_matrix(tmp_path / "m", agent(log, sleep), runs=5, extra=f"lease_s: {LEASE_S}")
    with two_workers(env, tmp_path) as workers:
        exp_id = submit(matrix, env)
        first = wait_until(lambda: list(deliveries(log, 0).values()), "run 0 to start")[0]
        os.kill(int(first["ppid"]), signal.SIGKILL)  # the pool process running run 0
        wait_until(lambda: store.reports.get(exp_id), "the report", timeout=180)
        logs = "".join(w.log.read_text() for w in workers)

    assert_each_run_earned(store, exp_id, runs=5)
    # Delivered twice: the killed one and the lease's re-send (Celery's requeue was
    # dropped while the lease lived), the two overlapping on this machine.
    assert len(deliveries(log, 0)) == 2 and overlapped(log, 0), deliveries(log, 0)
    assert store.results.get(exp_id, f"{exp_id}:T0:s:0").attempts == 2  # type: ignore[union-attr]
    assert "this copy of its message is dropped" in logs
    # The orphan of the killed delivery was stopped by the next delivery here, and
    # every folder is gone: the dead delivery's too.
    assert not alive(int(first["pid"]))
    assert "stopped what dead delivery" in logs
    wait_until(lambda: not any((tmp_path / "runs").iterdir()), "every folder removed", 30)


@pytest.mark.integration
def test_a_worker_frozen_past_its_lease_resumes_beside_its_replacement_and_corrupts_nothing(
    env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    log = shared_with_agents(tmp_path / "agents.log")
    matrix = command_matrix(tmp_path / "m", agent(log, "sleep 6"), runs=4,
                            extra=f"lease_s: {LEASE_S}")  # fmt: skip
    with two_workers(env, tmp_path) as workers:
        exp_id = submit(matrix, env)
        wait_until(lambda: all(deliveries(log, i) for i in range(4)), "every run to start")
        # Freeze the worker running run 0 (its agents, in sessions of their own, go on).
        pool = int(next(iter(deliveries(log, 0).values()))["ppid"])
        frozen = next(w for w in workers if os.getpgid(pool) == w.proc.pid)
        on_frozen = [i for i in range(4) if _started_by(frozen, deliveries(log, i))]
        os.killpg(frozen.proc.pid, signal.SIGSTOP)
        try:
            # Past the lease the other worker runs them again; resume the frozen one
            # while those copies are still at work.
            wait_until(lambda: all(len(deliveries(log, i)) == 2 for i in on_frozen),
                       "the frozen runs to be sent again and started", timeout=60)  # fmt: skip
        finally:
            os.killpg(frozen.proc.pid, signal.SIGCONT)
        resumed_at = time.time()
        wait_until(lambda: store.reports.get(exp_id), "the report", timeout=120)

    assert_each_run_earned(store, exp_id, runs=4)
    for i in on_frozen:  # the live delivery's result, not the frozen one's
        assert store.results.get(exp_id, f"{exp_id}:T0:s:{i}").attempts == 2  # type: ignore[union-attr]
        # The frozen delivery went on while its replacement's agent was still at work.
        assert max(d.get("end", 0.0) for d in deliveries(log, i).values()) > resumed_at
    assert "was taken over by a newer delivery" in frozen.log.read_text()
    wait_until(lambda: not any((tmp_path / "runs").iterdir()), "every folder removed", 30)


def _started_by(worker: Worker, runs: dict[str, dict[str, float]]) -> bool:
    return any(os.getpgid(int(d["ppid"])) == worker.proc.pid for d in runs.values())


@pytest.mark.integration
def test_resume_while_runs_are_queued_sends_only_the_lost_one(
    env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    log = shared_with_agents(tmp_path / "agents.log")
    queue = f"{QUEUE}-resume"  # nothing else is in it
    env = {**env, "EVALFLEET_QUEUE": queue}
    matrix = command_matrix(tmp_path / "m", agent(log, "sleep 3"), runs=2)
    exp_id = submit(matrix, env)  # no worker yet: both runs wait in the queue
    broker: Any = redis.Redis.from_url(env["EVALFLEET_BROKER_URL"])
    lost = next(raw for raw in broker.lrange(queue, 0, -1) if _run_index(raw) == 1)
    assert broker.lrem(queue, 1, lost) == 1  # run 1's message vanished; run 0's waits

    resumed = run_cli("resume", exp_id, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert "re-sending 1 run:" in resumed.stderr
    assert broker.llen(queue) == 2  # run 0 once, run 1 again
    with two_workers(env, tmp_path, queues=queue):
        wait_until(lambda: store.reports.get(exp_id), "the report", timeout=120)

    assert_each_run_earned(store, exp_id, runs=2)
    for i in range(2):  # each delivered once
        assert len(deliveries(log, i)) == 1
        assert store.results.get(exp_id, f"{exp_id}:T0:s:{i}").attempts == 1  # type: ignore[union-attr]


def test_resumes_at_once_send_each_lost_run_once_and_the_others_say_so(
    env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    queue = f"{QUEUE}-resumes"  # nothing else is in it, and no worker takes from it
    env = {**env, "EVALFLEET_QUEUE": queue}
    matrix = command_matrix(tmp_path / "m", "touch out.txt", runs=6)
    exp_id = submit(matrix, env)
    broker: Any = redis.Redis.from_url(env["EVALFLEET_BROKER_URL"])
    broker.delete(queue)  # every message vanished
    with store.experiments.resuming(exp_id):  # a resume on another machine, mid-way
        refused = run_cli("resume", exp_id, env=env)
    assert refused.returncode == 1 and broker.llen(queue) == 0
    assert "is being resumed by another `scheduler resume`" in " ".join(refused.stderr.split())

    racing = [start_cli("resume", exp_id, env=env) for _ in range(3)]
    answers = [proc.communicate(timeout=120)[1] for proc in racing]
    assert broker.llen(queue) == 6, answers  # each run once, whichever resume sent it
    sent = [" ".join(a.split()) for a in answers if "re-sending 6 runs" in " ".join(a.split())]
    assert len(sent) == 1, answers  # the others found them queued, or the resume held
    assert not store.redis.exists(store.keys.resuming(exp_id))
    broker.delete(queue)


def _run_index(message: bytes | str) -> int:
    """The run index in a run task's message (JSON, its body base64 JSON)."""
    args = json.loads(base64.b64decode(json.loads(message)["body"]))[0]
    return int(args[0]["run_index"])


@pytest.mark.integration
def test_a_process_that_left_the_agents_group_does_not_outlive_the_run(
    env: dict[str, str], store: Store, tmp_path: Path, start_worker: StartWorker
) -> None:
    pid_file = shared_with_agents(tmp_path / "escaped.pid")
    # setsid: a session and process group of its own, out of reach of the group kill.
    command = f"setsid sleep 300 & echo $! > {pid_file}; touch out.txt"
    matrix = command_matrix(tmp_path / "m", command, runs=1)
    start_worker(env)
    result = run_cli("submit", str(matrix), "--wait", "--json", env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    escaped = int(pid_file.read_text())
    wait_until(lambda: not alive(escaped), "the escaped process to be gone", timeout=10)
    runs = store.results.all(json.loads(result.stdout)["experiment"]["id"])
    assert len(runs) == 1 and runs[0].passed


# --- the folders themselves ------------------------------------------------------------------


def _scenario() -> Scenario:
    return Scenario.model_validate({"id": "s", "prompt": "go"}, context={"check_files": False})


def test_runs_and_deliveries_never_share_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALFLEET_WORKDIR", str(tmp_path))
    # Tier `a_b` with scenario `c`, and tier `a` with scenario `b_c`.
    one, other = "exp:a_b:c:0", "exp:a:b_c:0"
    assert folder_name(one).rsplit("+", 1)[0] != folder_name(other).rsplit("+", 1)[0]
    # A CLI that URL-decodes its working directory (OpenCode) finds it all the same.
    assert folder_name(one).startswith("exp_3Aa_5Fb_3Ac_3A0+")
    first, second = (
        prepare(one, Tier(id="T0"), _scenario(), "go"),
        prepare(one, Tier(id="T0"), _scenario(), "go"),
    )
    assert first.root != second.root and first.workspace.is_dir() and second.workspace.is_dir()
    second.remove()
    second.release()
    assert first.workspace.is_dir()  # one delivery's clean-up leaves the other's alone
    assert clear_dead_deliveries() == []  # alive: this process holds its lock
    assert first.workspace.is_dir()


# A delivery whose process dies (SIGKILL: nothing runs its clean-up) with a process
# of its own that left its group.
DIES = """
import os, subprocess, sys
from core.matrix import Scenario, Tier
from worker.workspace import MARKER, prepare
run_dir = prepare("exp:T0:s:0", Tier(id="T0"), Scenario.model_validate(
    {"id": "s", "prompt": "go"}, context={"check_files": False}), "go")
child = subprocess.Popen(["setsid", "sleep", "300"], env={**os.environ, MARKER: run_dir.marker},
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # no EOF wait
print(run_dir.root, child.pid, flush=True)
os.kill(os.getpid(), 9)
"""


def test_a_dead_deliverys_processes_and_folder_are_cleared_and_only_those(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALFLEET_WORKDIR", str(tmp_path))
    live = prepare("exp:T0:s:0", Tier(id="T0"), _scenario(), "go")
    live_child = subprocess.Popen(
        ["setsid", "sleep", "300"], env={**os.environ, MARKER: live.marker}
    )
    dying = subprocess.run(
        [sys.executable, "-c", DIES], capture_output=True, text=True, env=dict(os.environ)
    )
    folder, pid = dying.stdout.split()
    try:
        assert Path(folder).is_dir() and alive(int(pid))
        assert clear_dead_deliveries() == [Path(folder).name]
        wait_until(lambda: not alive(int(pid)), "the dead delivery's process to be killed", 10)
        assert not Path(folder).exists() and not Path(f"{folder}.lock").exists()
        assert live.workspace.is_dir() and alive(live_child.pid)  # the live one untouched
    finally:
        for process in (int(pid), live_child.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(process, signal.SIGKILL)
        live_child.wait()


def test_processes_left_behind_are_found_among_those_started_since_the_mark() -> None:
    """kill_groups_by_env reads only processes started after the delivery's pid mark,
    and every process again when the mark is too old to trust."""
    marker = f"mark-{os.getpid()}-{time.monotonic_ns()}"
    env = {**os.environ, MARKER: marker}
    earlier = subprocess.Popen(["setsid", "sleep", "300"], env=env)
    mark = pid_mark()
    assert mark is not None and mark.pid >= earlier.pid
    later = subprocess.Popen(["setsid", "sleep", "300"], env=env)
    try:
        found = kill_groups_by_env(MARKER, marker, since=mark)
        # What the process table held, for a failure on a busy machine to explain itself.
        seen = {
            p.pid: (alive(p.pid), _environ_has(p.pid, f"{MARKER}={marker}"))
            for p in (earlier, later)
        }
        assert found == 1, (
            f"found {found}; mark {mark}, now {pid_mark()}; pid: (alive, marked) {seen}"
        )  # the later one only
        later.wait(timeout=10)
        assert alive(earlier.pid)
        stale = PidMark(mark.pid, mark.at - 3600)  # ids may have turned around since
        assert kill_groups_by_env(MARKER, marker, since=stale) == 1
        earlier.wait(timeout=10)
    finally:
        for process in (earlier, later):
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait()


def test_processes_caught_inside_execve_are_found_too() -> None:
    """A process inside execve reads as having no environment for a moment: a dead
    delivery's `setsid sleep`, caught between setsid and sleep, was passed by and
    lived on (seen on CI). Processes started without any environment are left be."""
    bare = subprocess.Popen(["env", "-i", "sleep", "300"])
    try:
        for attempt in range(20):
            marker = f"execve-{os.getpid()}-{attempt}"
            env = {**os.environ, MARKER: marker}
            # Popen returns once setsid runs; its own exec of sleep is then under way.
            started = [subprocess.Popen(["setsid", "sleep", "300"], env=env) for _ in range(5)]
            try:
                assert kill_groups_by_env(MARKER, marker) == 5, f"attempt {attempt}"
                for process in started:
                    process.wait(timeout=10)
            finally:
                for process in started:
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
                    process.wait()
        wait_until(lambda: _sleeping(bare.pid), "the bare sleep", 10)
        assert kill_groups_by_env(MARKER, "execve-none") == 0 and alive(bare.pid)
    finally:
        bare.kill()
        bare.wait()


def _environ_has(pid: int, entry: str) -> bool | None:
    try:
        return f"\0{entry}\0".encode() in b"\0" + Path(f"/proc/{pid}/environ").read_bytes() + b"\0"
    except OSError:
        return None


def _sleeping(pid: int) -> bool:
    try:
        return alive(pid) and Path(f"/proc/{pid}/comm").read_text().strip() == "sleep"
    except OSError:
        return False
