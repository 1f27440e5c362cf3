"""Fault tests with real processes: workers SIGKILLed whole or in part, Redis restarted.

Every test checks the same promise (docs/RELIABILITY.md): each run ends with
exactly one stored result, counted once, and the experiment finishes.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from core.results.report import ExperimentInfo, ExperimentStatus, submitted_at
from core.results.run import RunStatus
from core.store import Store
from fleet.broker import running_embedded_broker
from scheduler.dispatch import BATCH_SIZE
from tests.conftest import PREFIX, StartWorker, Worker, run_cli, shared_with_agents, start_cli
from tests.support.experiments import command_matrix
from tests.support.fleet import RedisServer, alive, cli_worker, wait_until

pytestmark = pytest.mark.integration

LEASE_S = 5  # short for the tests, yet well above a heartbeat (LEASE_S / 3) on a busy machine


def write_matrix(
    folder: Path,
    command: str,
    *,
    runs: int,
    lease_s: float = LEASE_S,
    extra: str = "",
    agent: str = "",
) -> Path:
    return command_matrix(
        folder, command, runs=runs, extra=f"lease_s: {lease_s}\n{extra}", agent=agent
    )


def started(log: Path) -> list[str]:
    """`run_id pid` lines the test agents append when they start."""
    return log.read_text().splitlines() if log.exists() else []


def kill_agents(lines: list[str]) -> None:
    """An agent runs in its own process group: a dead worker does not take it along."""
    for line in lines:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(line.split()[1]), signal.SIGKILL)


def test_pool_processes_whose_worker_was_killed_hand_their_runs_back_and_end(
    fleet_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    """SIGKILL to a worker's main process alone (`kill -9 PID`, an OOM kill): its pool
    processes, each in a run, were left to finish it, then waited for work for ever on a
    pipe nobody writes. Now each gets TERM as its parent dies: its run has the grace,
    then is handed back (its agent stopped), the process ends, and a sweep sends the run
    again once its message has waited a lease."""
    log = shared_with_agents(tmp_path / "started.log")
    tried = shared_with_agents(tmp_path / "tried", folder=True)
    # The first delivery of each run outlasts the test; the second passes at once.
    command = (
        f'echo "$EVALFLEET_RUN_ID $$" >> {log}; '
        f"if [ ! -e {tried}/$EVALFLEET_RUN_INDEX ]; then touch {tried}/$EVALFLEET_RUN_INDEX; "
        "sleep 60; fi; touch out.txt"
    )
    matrix = write_matrix(tmp_path / "m", command, runs=2)
    queue = {**fleet_env, "EVALFLEET_QUEUE": f"{fleet_env['EVALFLEET_QUEUE']}-orphans"}
    submitted = run_cli("submit", str(matrix), env=queue)
    assert submitted.returncode == 0, submitted.stderr
    exp_id = submitted.stdout.strip()
    worker = cli_worker(queue, tmp_path / "w.log", "--concurrency", "2", "--grace", "1")
    try:
        wait_until(lambda: len(started(log)) == 2, "both runs to start", timeout=120)
        pool = _children(worker.proc.pid)
        assert len(pool) == 2, pool
        os.kill(worker.proc.pid, signal.SIGKILL)  # the main process alone
        wait_until(lambda: not any(alive(pid) for pid in pool), "the pool to end", timeout=60)
    finally:
        worker.stop()
    agents = [int(line.split()[1]) for line in started(log)]
    assert len(agents) == 2
    wait_until(lambda: not any(alive(pid) for pid in agents), "their agents to stop", timeout=30)
    assert store.results.all(exp_id) == []  # handed back: neither run recorded as failed
    # A sweep sends them again once their messages have waited a lease: a worker sweeping
    # every second runs them.
    fast = {**queue, "EVALFLEET_SWEEP_S": "1"}
    survivor = cli_worker(fast, tmp_path / "w2.log", "--concurrency", "2")
    try:
        wait_until(lambda: store.reports.get(exp_id) is not None, "the report", timeout=120)
    finally:
        survivor.stop()
    runs = store.results.all(exp_id)
    assert len(runs) == 2 and all(r.passed and r.attempts == 2 for r in runs), [
        (r.fail_reason, r.attempts) for r in runs
    ]
    handed = "handed back (its worker's main process ended, 1 s grace over): a sweep sends it again"
    assert all(store.attempts.of(exp_id, r.run_id)[0].outcome == handed for r in runs)


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (a worker's pool)."""
    children = []
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                children.append(int(entry))
    return children


def test_status_says_when_a_runs_lease_stopped_being_renewed(
    fleet_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    """A worker killed mid-run: its run still shows as running until its lease lapses.
    `status` says so once the lease has gone unrenewed for half of `lease_s`, and when the
    run comes back; not while its worker lives."""
    log = shared_with_agents(tmp_path / "started.log")
    tried = shared_with_agents(tmp_path / "tried", folder=True)
    command = (
        f'echo "$EVALFLEET_RUN_ID $$" >> {log}; '
        f"if [ ! -e {tried}/once ]; then touch {tried}/once; sleep 60; fi; touch out.txt"
    )
    matrix = write_matrix(tmp_path / "m", command, runs=1, lease_s=20)
    queue = {**fleet_env, "EVALFLEET_QUEUE": f"{fleet_env['EVALFLEET_QUEUE']}-unrenewed"}
    doomed = Worker(queue, tmp_path / "a.log", concurrency=1, queues=queue["EVALFLEET_QUEUE"])
    try:
        submitted = run_cli("submit", str(matrix), env=queue)
        assert submitted.returncode == 0, submitted.stderr
        exp_id = submitted.stdout.strip()
        wait_until(lambda: started(log), "the run to start", timeout=120)
        assert "not heard from" not in run_cli("status", exp_id, env=queue).stderr
        os.killpg(doomed.proc.pid, signal.SIGKILL)
        kill_agents(started(log))

        def said() -> str | None:
            text = " ".join(run_cli("status", exp_id, env=queue).stderr.split())
            return text if "not heard from" in text else None

        # Said from 10 s after the last renewal until the lease lapses, 20 s after it.
        text = wait_until(said, "status to say the lease is not renewed", timeout=20)
    finally:
        doomed.stop()
    assert re.search(
        r"1 run in progress not heard from for up to \d+ s .*: a worker killed or frozen\? "
        r"Such runs are sent again once their leases lapse, within \d+ s",
        text,
    ), text
    survivor = Worker({**queue, "EVALFLEET_SWEEP_S": "1"}, tmp_path / "b.log",
                      queues=queue["EVALFLEET_QUEUE"])  # fmt: skip
    try:
        wait_until(lambda: store.reports.get(exp_id), "the run sent again", timeout=90)
    finally:
        survivor.stop()
    [run] = store.results.all(exp_id)
    assert run.passed and run.attempts == 2


def test_a_worker_killed_mid_run_loses_nothing_and_counts_each_run_once(
    fleet_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    log = shared_with_agents(tmp_path / "started.log")
    command = f'echo "$EVALFLEET_RUN_ID $$" >> {log}; sleep 3; touch out.txt'
    matrix = write_matrix(tmp_path / "m", command, runs=4)
    # The survivor sweeps every second; nobody else follows this experiment.
    doomed = Worker({**fleet_env, "EVALFLEET_WORKDIR": str(tmp_path / "a")}, tmp_path / "a.log")
    survivor = Worker({**fleet_env, "EVALFLEET_SWEEP_S": "1"}, tmp_path / "b.log", name="b")
    try:
        submitted = run_cli("submit", str(matrix), env=fleet_env)
        assert submitted.returncode == 0, submitted.stderr
        exp_id = submitted.stdout.strip()
        # Two processes each: every run is in progress, two of them on the doomed worker.
        wait_until(lambda: len(started(log)) == 4, "every run to start", timeout=120)
        on_doomed = [line for line in started(log) if _pid_in_group(line, doomed.proc.pid)]
        assert on_doomed, started(log)

        os.killpg(doomed.proc.pid, signal.SIGKILL)  # the whole worker: a CI runner torn down
        kill_agents(on_doomed)
        killed_at = time.monotonic()
        wait_until(lambda: store.reports.get(exp_id) is not None, "the report", timeout=90)
        recovered_in = time.monotonic() - killed_at
    finally:
        doomed.stop()
        survivor.stop()

    lost = {line.split()[0] for line in on_doomed}
    runs = store.results.all(exp_id)
    assert len(runs) == 4 and len({r.run_id for r in runs}) == 4
    assert all(r.passed for r in runs), [r.fail_reason for r in runs]
    assert {r.run_id for r in runs if r.attempts == 2} == lost
    report = store.reports.get(exp_id)
    assert report is not None and report.experiment.completed_runs == 4
    assert report.tiers["T0"].runs == 4 and report.tiers["T0"].passes == 4
    # Lease expiry (3 s), a sweep (1 s), the re-run (3 s), and a generous margin.
    assert recovered_in < LEASE_S + 1 + 3 + 30
    executions = [line.split()[0] for line in started(log)]
    assert sorted(set(executions)) == sorted(r.run_id for r in runs)
    assert all(executions.count(run) == (2 if run in lost else 1) for run in executions)

    # The dead worker's messages stay unacknowledged in Redis; the broker would hand
    # them out again after its visibility timeout, hours later. The sweep drops
    # them instead, since their runs were sent again: nothing comes back late.
    before = store.redis.get(f"{PREFIX}exp:{exp_id}:report")
    sweeper = Worker({**fleet_env, "EVALFLEET_SWEEP_S": "1"}, tmp_path / "b2.log", name="b2")
    try:
        wait_until(lambda: not _unacked_runs(store, exp_id), "the stale messages dropped", 30)
    finally:
        sweeper.stop()
    assert store.experiments.info(exp_id).completed_runs == 4
    assert [line.split()[0] for line in started(log)] == executions  # nothing ran again
    assert store.redis.get(f"{PREFIX}exp:{exp_id}:report") == before


# A process that takes a run's message as a worker's prefetch does, then dies.
THIEF = """
import sys, time
from kombu import Connection, Exchange, Queue
with Connection(sys.argv[1]) as conn:
    name = sys.argv[2]
    queue = Queue(name, Exchange(name), routing_key=name)(conn.default_channel)
    print("took" if queue.get(no_ack=False) else "empty", flush=True)
    time.sleep(600)
"""


def _queued_experiment(
    fleet_env: dict[str, str], tmp_path: Path, queue_suffix: str, runs: int
) -> tuple[str, str, Path]:
    """An experiment sent to a default queue of its own (the submitter's
    EVALFLEET_QUEUE), with no worker to take it yet: (experiment id, queue, the log
    each started agent writes its run id to)."""
    log = shared_with_agents(tmp_path / "started.log")
    queue = f"{fleet_env['EVALFLEET_QUEUE']}-{queue_suffix}"  # nothing else is in it
    matrix = write_matrix(
        tmp_path / "m", f'echo "$EVALFLEET_RUN_ID $$" >> {log}; touch out.txt', runs=runs
    )
    submitted = run_cli("submit", str(matrix), env={**fleet_env, "EVALFLEET_QUEUE": queue})
    assert submitted.returncode == 0, submitted.stderr
    return submitted.stdout.strip(), queue, log


def _sweeping_worker(fleet_env: dict[str, str], tmp_path: Path, queue: str) -> Worker:
    """A worker that takes the experiment's queue, sweeping every second. Its own
    default queue is another: what it sends again must go where the submitter sent."""
    return Worker({**fleet_env, "EVALFLEET_SWEEP_S": "1"}, tmp_path / "w.log", queues=queue)


def _each_ran_once(store: Store, exp_id: str, log: Path, runs: int) -> None:
    results = store.results.all(exp_id)
    assert len(results) == runs and all(r.passed and r.attempts == 1 for r in results)
    assert sorted(line.split()[0] for line in started(log)) == sorted(r.run_id for r in results)


def test_a_run_taken_but_never_started_goes_back_to_its_queue(
    fleet_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    exp_id, queue, log = _queued_experiment(fleet_env, tmp_path, "taken", runs=2)
    thief = subprocess.Popen(
        [sys.executable, "-c", THIEF, fleet_env["EVALFLEET_BROKER_URL"], queue],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert thief.stdout is not None and thief.stdout.readline().strip() == "took"
    thief.kill()  # died holding the message: Redis keeps it as unacknowledged, for hours
    thief.wait()
    taken_at = time.monotonic()

    worker = _sweeping_worker(fleet_env, tmp_path, queue)
    try:
        wait_until(lambda: store.reports.get(exp_id) is not None, "the report", timeout=90)
    finally:
        worker.stop()
    assert time.monotonic() - taken_at < LEASE_S + 1 + 60  # not hours; generous under load
    _each_ran_once(store, exp_id, log, runs=2)
    assert "was taken but never started: back in its queue" in (tmp_path / "w.log").read_text()


def test_a_run_whose_message_vanished_is_sent_again_once(
    fleet_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    """kombu pops a message, then records it as unacknowledged: Redis going away in
    between loses it. A run that is nowhere for a lease is sent again, once."""
    exp_id, queue, log = _queued_experiment(fleet_env, tmp_path, "vanished", runs=3)
    broker = redis.Redis.from_url(fleet_env["EVALFLEET_BROKER_URL"])
    vanished = broker.rpop(queue)  # the next message a worker would have taken
    assert vanished is not None and broker.llen(queue) == 2
    other = json.loads(broker.lindex(queue, 0) or b"null")
    lost_at = time.monotonic()

    worker = _sweeping_worker(fleet_env, tmp_path, queue)
    try:
        wait_until(
            lambda: store.experiments.info(exp_id).completed_runs >= 2, "the other runs", timeout=60
        )
        # A stale unacknowledged copy of a finished run's message, as a restart can
        # leave: it must not hide the vanished run.
        tag = uuid.uuid4().hex
        broker.hset("unacked", tag, json.dumps([other, queue, queue]))
        broker.zadd("unacked_index", {tag: time.time() - 3600})
        wait_until(lambda: store.reports.get(exp_id) is not None, "the report", timeout=90)
        recovered_in = time.monotonic() - lost_at
        time.sleep(2 * LEASE_S)  # sweeps go on: the run must not be sent a second time
    finally:
        worker.stop()
    # Within sweeps of a lease, not the broker's visibility timeout (hours); generous
    # for a loaded machine.
    assert recovered_in < LEASE_S + 60
    _each_ran_once(store, exp_id, log, runs=3)
    # Its own lines only: the worker sweeps every experiment of the session's store.
    sent = [line for line in (tmp_path / "w.log").read_text().splitlines() if exp_id in line]
    assert sum("(its message vanished): sent again" in line for line in sent) == 1
    assert not store.redis.exists(f"{PREFIX}exp:{exp_id}:unaccounted")
    assert not broker.hexists("unacked", tag) and broker.zscore("unacked_index", tag) is None


def test_a_finished_experiments_stale_messages_are_dropped_not_handed_out_hours_later(
    fleet_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    """A dead worker's unacknowledged message of a run that was sent again and finished
    before any sweep came: the experiment is no longer active, and the sweep still
    drops the message (the broker would hand it out after its visibility timeout)."""
    exp_id, queue, log = _queued_experiment(fleet_env, tmp_path, "finished-stale", runs=1)
    broker = redis.Redis.from_url(fleet_env["EVALFLEET_BROKER_URL"])
    message = json.loads(broker.lindex(queue, 0) or b"null")
    worker = _sweeping_worker(fleet_env, tmp_path, queue)
    try:
        wait_until(lambda: store.reports.get(exp_id) is not None, "the report", timeout=90)
        assert store.experiments.info(exp_id).finished_at is not None
        fresh, stale = uuid.uuid4().hex, uuid.uuid4().hex
        for tag, taken_at in ((fresh, time.time()), (stale, time.time() - 3600)):
            broker.hset("unacked", tag, json.dumps([message, queue, queue]))
            broker.zadd("unacked_index", {tag: taken_at})
        wait_until(lambda: not broker.hexists("unacked", stale), "the stale message dropped", 30)
        # Taken less than a lease (60 s) ago: possibly still at work, left alone.
        assert broker.hexists("unacked", fresh)
    finally:
        worker.stop()
        broker.hdel("unacked", fresh)
        broker.zrem("unacked_index", fresh)
    assert broker.zscore("unacked_index", stale) is None
    _each_ran_once(store, exp_id, log, runs=1)


def test_copies_of_a_running_runs_message_neither_run_nor_count_as_deliveries(
    fleet_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    """Copies of a run's message while it runs, as a broker's restore of unacknowledged
    messages after a restart hands out: each finds the run's live lease and is
    dropped. (Each copy used to take the run over as a new delivery; the fourth gave
    the run up as an infrastructure error while the first still ran.)"""
    log = shared_with_agents(tmp_path / "started.log")
    queue = f"{fleet_env['EVALFLEET_QUEUE']}-copies"
    matrix = write_matrix(
        tmp_path / "m", f'echo "$EVALFLEET_RUN_ID $$" >> {log}; sleep 4; touch out.txt', runs=1
    )
    submitted = run_cli("submit", str(matrix), env={**fleet_env, "EVALFLEET_QUEUE": queue})
    assert submitted.returncode == 0, submitted.stderr
    exp_id = submitted.stdout.strip()
    broker = redis.Redis.from_url(fleet_env["EVALFLEET_BROKER_URL"])
    message = broker.lindex(queue, 0)
    assert message is not None
    worker = Worker({**fleet_env, "EVALFLEET_SWEEP_S": "1"}, tmp_path / "w.log", queues=queue)
    try:
        wait_until(lambda: started(log), "the run to start", timeout=60)
        broker.lpush(queue, *[message] * 3)
        wait_until(lambda: store.reports.get(exp_id) is not None, "the report", timeout=90)
        wait_until(lambda: broker.llen(queue) == 0, "the copies taken", timeout=30)
        time.sleep(1)  # the last copy's begin, once taken
    finally:
        worker.stop()
    _each_ran_once(store, exp_id, log, runs=1)
    assert len(store.attempts.of(exp_id, f"{exp_id}:T0:s:0")) == 1  # one delivery recorded
    assert (tmp_path / "w.log").read_text().count("this copy of its message is dropped") == 3


def test_a_pool_process_terminated_while_the_worker_stays_hands_back_only_that_run(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """Celery terminates a job with SIGTERM to its pool process (a revoke with
    terminate; a cancel on connection loss): that run is handed back after its grace
    and runs again, and the process, which the worker did not ask to leave, runs
    the next runs in full (it used to hand back every later run after its grace,
    until each was given up as an infrastructure error)."""
    log = shared_with_agents(tmp_path / "started.log")
    command = f'echo "$EVALFLEET_RUN_ID $$" >> {log}; sleep 2; touch out.txt'
    matrix = write_matrix(tmp_path / "m", command, runs=3)
    worker = start_worker({"EVALFLEET_SHUTDOWN_GRACE": "0.5"}, concurrency=1)
    submitted = run_cli("submit", str(matrix), env=fleet_env)
    assert submitted.returncode == 0, submitted.stderr
    exp_id = submitted.stdout.strip()
    first = wait_until(lambda: started(log), "the first run to start", timeout=60)[0]
    os.kill(_parent(int(first.split()[1])), signal.SIGTERM)  # the pool process
    wait_until(lambda: store.reports.get(exp_id) is not None, "the report", timeout=120)
    runs = {r.run_index: r for r in store.results.all(exp_id)}
    assert all(r.passed for r in runs.values()), [r.fail_reason for r in runs.values()]
    interrupted = int(first.split()[0].rsplit(":", 1)[1])
    assert runs[interrupted].attempts == 2  # handed back once, then run in full
    assert all(r.attempts == 1 for i, r in runs.items() if i != interrupted)
    assert worker.log.read_text().count("reject requeue=True") == 1  # that run, once


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _pid_in_group(line: str, pgid: int) -> bool:
    """Was this agent started by a process of the worker whose group is `pgid`?"""
    pid = int(line.split()[1])
    try:
        return os.getpgid(_parent(pid)) == pgid
    except (OSError, ValueError, IndexError):
        return False


def _unacked_runs(store: Store, exp_id: str) -> list[str]:
    """Unacknowledged messages of this experiment's runs (kombu's `unacked` hash)."""
    return [raw for raw in store.redis.hvals("unacked") if exp_id in base64.b64decode(
        json.loads(raw)[0]["body"]).decode()]  # fmt: skip


def test_a_run_that_kills_its_pool_process_is_retried_then_capped(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    kills = tmp_path / "kills"
    # $PPID of the agent's bash is the Celery pool process running the run; $$ is
    # the bash itself, which would sleep on for 60 s with nobody left to stop it.
    command = (
        f'if [ "$EVALFLEET_RUN_INDEX" = 0 ]; then echo $$ >> {kills}; kill -9 $PPID; sleep 60; fi; '
        "touch out.txt"
    )
    # Redelivery here is Celery's (the message is requeued when the pool process
    # dies), not the lease's: a long lease keeps the sweep out of it.
    # Unconfined: a run's own user cannot kill the worker's pool process (root's).
    matrix = write_matrix(
        tmp_path, command, runs=3, lease_s=60, extra="max_attempts: 2", agent="sandbox: none"
    )
    worker = start_worker(concurrency=2)
    result = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env, timeout=180)
    assert result.returncode == 3, result.stderr  # the killer run is an infrastructure error
    report = json.loads(result.stdout)
    exp_id = report["experiment"]["id"]

    killer = next(r for r in store.results.all(exp_id.strip()) if r.run_index == 0)
    assert killer.status == RunStatus.infra_error
    assert killer.attempts == 3
    assert "gave up after 2 deliveries" in (killer.fail_reason or "")
    agents = [int(pid) for pid in kills.read_text().split()]
    assert len(agents) == 2  # ran twice, then the cap recorded it
    # Each redelivery stopped the agent its predecessor left running.
    wait_until(lambda: not any(alive(pid) for pid in agents), "the left agents to be reaped", 10)
    assert "stopped what dead delivery" in worker.log.read_text()
    assert report["experiment"]["status"] == "complete"  # the chord still fired
    assert report["tiers"]["T0"]["errors"] == 1 and report["tiers"]["T0"]["passes"] == 2
    assert worker.proc.poll() is None  # the worker itself survived


def test_a_confined_agent_that_kills_its_worker_for_a_second_try_gets_none(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """An agent failing its first try kills its pool process and the worker's main process
    (SIGKILL), so that its run is handed back or sent again and a second try passes. Run
    as a user of the run's own (the default), it may signal neither: the run is recorded
    once, failed, as its agent earned, and the worker runs on."""
    tried = shared_with_agents(tmp_path / "tried", folder=True)
    said = shared_with_agents(tmp_path / "kills")
    command = (
        f"if [ -e {tried}/once ]; then touch out.txt; exit 0; fi; touch {tried}/once; "
        "pool=$PPID; main=$(awk '{print $4}' /proc/$pool/stat); "
        f'kill -9 "$main" "$pool" 2>/dev/null; echo "$? $pool $main" >> {said}'
    )
    queue = f"{fleet_env['EVALFLEET_QUEUE']}-killer"
    env = {**fleet_env, "EVALFLEET_QUEUE": queue}
    worker = start_worker(concurrency=1, queues=queue)
    matrix = write_matrix(tmp_path / "m", command, runs=1, lease_s=5)
    result = run_cli("submit", str(matrix), "--wait", "--json", env=env, timeout=180)
    assert result.returncode == 0, result.stderr
    exp_id = json.loads(result.stdout)["experiment"]["id"]
    [run] = store.results.all(exp_id)
    assert not run.passed and run.attempts == 1, (run.fail_reason, run.attempts)
    code, pool, main = said.read_text().split()
    assert code != "0" and alive(int(pool)) and alive(int(main))  # refused: both run on
    assert worker.proc.poll() is None


# --- Redis restarted mid-experiment --------------------------------------------------------


@pytest.fixture
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    # Not in the test's folder, where its matrix is: Redis's files there (an AOF rewrite's
    # temporary one, there and gone) would be among the experiment's files a submit sends.
    server = RedisServer(tmp_path_factory.mktemp("redis"), password=uuid.uuid4().hex)
    yield server
    server.stop()


def test_redis_restarted_mid_experiment_loses_nothing(
    fleet_env: dict[str, str], own_redis: RedisServer, tmp_path: Path
) -> None:
    """Runs in progress go on through the restart and are not run again. A grace
    shorter than a run: had the restart's connection loss read as the worker leaving
    (Celery cancelling runs with SIGTERM), each later run would be handed back."""
    env = {**fleet_env, "EVALFLEET_BROKER_URL": own_redis.url, "EVALFLEET_SHUTDOWN_GRACE": "1"}
    log = shared_with_agents(tmp_path / "started.log")
    # A lease the 2 s outage cannot lapse: a lapsed one would rightly send a run again.
    matrix = write_matrix(
        tmp_path, f'echo "$EVALFLEET_RUN_ID $$" >> {log}; sleep 2; touch out.txt', runs=8,
        lease_s=20,
    )  # fmt: skip
    workers = [Worker(env, tmp_path / f"w{i}.log", name=f"w{i}") for i in range(2)]
    store = Store.from_url(own_redis.url, prefix=PREFIX)
    follower = start_cli("submit", str(matrix), "--wait", "--json", env=env)
    try:
        wait_until(lambda: _results(store) >= 2, "two results", timeout=60)
        own_redis.restart(down_s=2)  # with runs in progress and runs still queued
        try:
            out, err = follower.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the experiment did not finish: {_where_runs_are(store)}")
    finally:
        follower.kill()
        for worker in workers:
            worker.stop()
    assert follower.returncode == 0, err
    assert "broker unreachable" in err  # the follower waited for it
    report = json.loads(out)
    runs = store.results.all(report["experiment"]["id"])
    assert len(runs) == 8 and len({r.run_id for r in runs}) == 8
    assert all(r.passed for r in runs), [r.fail_reason for r in runs]
    assert report["experiment"]["completed_runs"] == report["experiment"]["total_runs"] == 8
    assert report["tiers"]["T0"]["runs"] == 8 and report["tiers"]["T0"]["passes"] == 8
    _each_ran_once(store, report["experiment"]["id"], log, runs=8)
    for i in range(2):  # the workers rode the restart out (fleet.kombu_guard)
        worker_log = (tmp_path / f"w{i}.log").read_text()
        assert "Unrecoverable error" not in worker_log and "handed back" not in worker_log


def test_a_follower_that_starts_while_the_broker_is_away_waits_for_it(
    fleet_env: dict[str, str], own_redis: RedisServer, tmp_path: Path
) -> None:
    """`submit --wait` reaches its follower late (a loaded machine), in an outage: its
    first read waits for the broker as every later one does, and it ends with the
    report, instead of a ConnectionError's traceback."""
    from rich.console import Console

    from fleet.app import fleet_app
    from scheduler.follow import follow

    env = {**fleet_env, "EVALFLEET_BROKER_URL": own_redis.url}
    worker = Worker(env, tmp_path / "w.log")
    try:
        done = run_cli(
            "submit", str(write_matrix(tmp_path, "touch out.txt", runs=1)), "--wait", env=env
        )
    finally:
        worker.stop()
    assert done.returncode == 0, done.stderr
    store = Store.from_url(own_redis.url, prefix=PREFIX)
    exp_id = store.experiments.latest()
    assert exp_id is not None
    own_redis.stop()
    said = Console(file=io.StringIO(), width=200)
    failed: list[BaseException] = []

    def following() -> None:
        try:
            follow(fleet_app(own_redis.url), store, exp_id, said)
        except BaseException as exc:  # what the follower would have died of
            failed.append(exc)

    follower = threading.Thread(target=following)
    follower.start()
    time.sleep(2)
    assert follower.is_alive(), failed
    own_redis.start()
    follower.join(timeout=60)
    assert not follower.is_alive() and failed == []
    assert "broker unreachable" in said.file.getvalue()  # type: ignore[attr-defined]


def test_a_restart_that_lost_the_experiment_is_named_and_its_runs_in_flight_write_nothing(
    fleet_env: dict[str, str], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A broker keeping nothing on disk restarted with runs in progress and queued: the
    runs in progress end without writing a key of the lost experiment back, and each
    command says it was lost in the restart, with the fix, instead of "no experiment"."""
    server = RedisServer(tmp_path_factory.mktemp("redis"), uuid.uuid4().hex, persistent=False)
    env = {**fleet_env, "EVALFLEET_BROKER_URL": server.url}
    log = shared_with_agents(tmp_path / "started.log")
    matrix = write_matrix(
        tmp_path, f'echo "$EVALFLEET_RUN_ID $$" >> {log}; sleep 6; touch out.txt', runs=6,
        lease_s=20,
    )  # fmt: skip
    worker = Worker(env, tmp_path / "w.log", concurrency=1)
    try:
        submitted = run_cli("submit", str(matrix), env=env)
        assert submitted.returncode == 0, submitted.stderr
        exp_id = submitted.stdout.strip()
        wait_until(lambda: started(log), "a run in progress", timeout=60)
        # The id tells its submit time to the second: a restart within the same few
        # seconds cannot be told to have come after it.
        time.sleep(max(0.0, (submitted_at(exp_id) or 0) + 3.5 - time.time()))
        server.restart(down_s=1)
        dropped = f"dropped: no experiment '{exp_id}' in this store: it was submitted at"
        wait_until(lambda: dropped in worker.log.read_text(), "the run in progress to end", 60)
        client = redis.Redis.from_url(server.url)
        assert list(client.scan_iter(match=f"*{exp_id}*")) == []
        for command in (["status", exp_id], ["report", exp_id], ["resume", exp_id]):
            answered = run_cli(*command, env=env)
            said = " ".join(answered.stderr.split())
            assert answered.returncode == 2 and "Traceback" not in said, (command, said)
            assert "and the broker restarted at" in said and "which lost it" in said, said
            assert "set `appendonly yes` on the broker" in said, said
        assert len(started(log)) == 1  # the queued runs went with the broker
    finally:
        worker.stop()
        server.stop()


@dataclass(frozen=True)
class Footprint:
    """What a submit takes of a broker's memory (bytes)."""

    kept: int  # everything the submit leaves in Redis: the experiment, its files, its runs
    batch: int  # one full batch of run messages, which Redis holds whole while it parses it

    def per_run(self, runs: int) -> int:
        return self.kept // runs


def footprint(
    env: dict[str, str], matrix: Path, tmp_path_factory: pytest.TempPathFactory
) -> Footprint:
    """The matrix submitted, as the code sends it, to a scratch redis-server of its own:
    a full-broker test sizes its limit from this, not from a constant that fits one
    machine's allocator and not another's."""
    scratch = RedisServer(tmp_path_factory.mktemp("scratch"), uuid.uuid4().hex, persistent=False)
    try:
        client = redis.Redis.from_url(scratch.url)
        before = int(client.info("memory")["used_memory"])
        submitted = run_cli("submit", str(matrix), env={**env, "EVALFLEET_BROKER_URL": scratch.url})
        assert submitted.returncode == 0, submitted.stderr
        kept = int(client.info("memory")["used_memory"]) - before
        messages = client.lrange(env["EVALFLEET_QUEUE"], 0, -1)
    finally:
        scratch.stop()
    longest = max(len(m) for m in messages)
    return Footprint(kept=kept, batch=min(BATCH_SIZE, len(messages)) * longest)


def leave_room(server: RedisServer, room: int) -> redis.Redis:
    """The broker made to refuse writes (maxmemory, noeviction) once it holds `room` bytes
    more than now; a client of it."""
    broker = redis.Redis.from_url(server.url)
    broker.config_set("maxmemory-policy", "noeviction")
    broker.config_set("maxmemory", int(broker.info("memory")["used_memory"]) + room)
    return broker


def test_evidence_a_full_broker_refuses_is_named_and_every_run_keeps_its_outcome(
    fleet_env: dict[str, str],
    own_redis: RedisServer,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The probe's steps: agents printing megabytes into a broker with little room
    (maxmemory, noeviction). Every run ends with the outcome its agent earned (even
    runs pass, odd fail); the evidence that did not fit is counted in the report and
    said of the run by `show`, never read as a killed worker; `submit --wait` exits
    with the experiment's status, no traceback."""
    env = {**fleet_env, "EVALFLEET_BROKER_URL": own_redis.url}
    noisy = (
        "head -c 3000000 /dev/urandom | base64; "
        "if [ $((EVALFLEET_RUN_INDEX % 2)) -eq 0 ]; then touch out.txt; fi"
    )
    matrix = write_matrix(tmp_path, noisy, runs=8)
    submit = footprint(env, matrix, tmp_path_factory)
    # Room for the submit, and for the evidence of two or three runs (each kept to
    # 256 KB, compressed).
    leave_room(own_redis, submit.kept + submit.batch + 600_000)
    worker = Worker(env, tmp_path / "w.log", concurrency=1)
    try:
        submitted = run_cli("submit", str(matrix), "--wait", "--json", env=env, timeout=240)
    finally:
        worker.stop()
    assert "Traceback" not in submitted.stderr, submitted.stderr
    assert submitted.returncode == 0, submitted.stderr
    report = json.loads(submitted.stdout)
    exp_id = report["experiment"]["id"]
    store = Store.from_url(own_redis.url, prefix=PREFIX)
    runs = store.results.all(exp_id)
    assert sorted((r.run_index, r.passed) for r in runs) == [(i, i % 2 == 0) for i in range(8)]
    missing = report["evidence_missing"]
    assert 0 < missing < 8, missing
    said = " ".join(run_cli("report", exp_id, "--format", "markdown", env=env).stdout.split())
    assert f"evidence of {missing} runs was not stored" in said, said
    unstored = [r.run_id for r in runs if store.evidence.get(exp_id, r.run_id) is None]
    assert len(unstored) == missing
    shown = run_cli("show", unstored[-1], env=env)
    out = " ".join((shown.stdout + shown.stderr).split())
    assert shown.returncode == 0 and "evidence was not stored" in out, out
    assert "worker was killed" not in out


def test_a_submit_a_full_broker_stops_part_way_is_completed_exactly_by_resume(
    fleet_env: dict[str, str],
    own_redis: RedisServer,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A broker that refuses writes (maxmemory, noeviction) part-way through a submit,
    with less room than one batch takes while Redis parses it: the submit sends smaller
    batches, as many runs as fit (it used to stop before sending any), then says so in
    one sentence with the fix, and `resume` sends exactly the runs not sent, saying how
    many it found where. No worker: the queue itself shows each run once."""
    env = {**fleet_env, "EVALFLEET_BROKER_URL": own_redis.url}
    runs = 1600
    matrix = write_matrix(tmp_path, "touch out.txt", runs=runs)
    submit = footprint(env, matrix, tmp_path_factory)
    room = submit.batch // 2  # less than a batch, room for some runs, not all
    assert 20 * submit.per_run(runs) < room < submit.kept, submit
    broker = leave_room(own_redis, room)
    refused = run_cli("submit", str(matrix), env=env)
    assert refused.returncode == 1, refused.stderr
    said = " ".join(refused.stderr.split())
    assert "Traceback" not in refused.stderr and "scheduler resume" in said, said
    found = re.search(r"after ([\d,]+) of ([\d,]+) runs of experiment (\S+) were sent", said)
    assert found is not None, said
    sent, exp_id = int(found[1].replace(",", "")), found[3]
    assert 0 < sent < runs and int(found[2].replace(",", "")) == runs
    queue = fleet_env["EVALFLEET_QUEUE"]
    assert broker.llen(queue) == sent

    broker.config_set("maxmemory", 0)  # memory freed
    resumed = run_cli("resume", exp_id, env=env)
    assert resumed.returncode == 0, resumed.stderr
    said = " ".join(resumed.stderr.split())
    unsent = runs - sent
    assert f"re-sending {unsent} runs" in said and f"{sent} still queued, 0 running" in said, said
    assert "never sent (its submit stopped part-way)" in said
    messages = broker.lrange(queue, 0, -1)
    sent_ids = [
        json.loads(base64.b64decode(json.loads(m)["body"]))[0][0]["run_id"] for m in messages
    ]
    assert len(sent_ids) == runs and len(set(sent_ids)) == runs  # every run, once
    again = run_cli("resume", exp_id, env=env)  # nothing new to find
    assert "re-sending 0 runs" in " ".join(again.stderr.split()) and broker.llen(queue) == runs


def test_a_broker_too_full_for_the_experiments_record_keeps_nothing_of_it(
    fleet_env: dict[str, str], own_redis: RedisServer, tmp_path: Path
) -> None:
    """Full before the submit's first write: one sentence, exit 1, and no key of the
    experiment left for a later command to trip on."""
    env = {**fleet_env, "EVALFLEET_BROKER_URL": own_redis.url}
    broker = redis.Redis.from_url(own_redis.url)
    broker.config_set("maxmemory-policy", "noeviction")
    broker.config_set("maxmemory", 1)
    refused = run_cli("submit", str(write_matrix(tmp_path, "touch out.txt", runs=3)), env=env)
    broker.config_set("maxmemory", 0)
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 1 and "Traceback" not in said, said
    found = re.search(r"nothing of experiment (\S+) was kept: submit again once it takes", said)
    assert found is not None, said
    assert list(broker.scan_iter(match=f"*{found[1]}*")) == []
    assert broker.llen(fleet_env["EVALFLEET_QUEUE"]) == 0


def test_a_submit_stopped_part_way_is_run_to_the_end_by_resume_and_a_worker(
    fleet_env: dict[str, str], own_redis: RedisServer, tmp_path: Path
) -> None:
    """The test above's other half: nothing stays stuck. A broker that refuses the
    submit's messages (an ACL without LPUSH: a refused write, as a full broker's, at the
    same step) after taking the experiment's record; `resume --wait` beside a worker
    then runs every run once, each with the outcome its agent earned."""
    broker = redis.Redis.from_url(own_redis.url)
    broker.acl_setuser(
        "no-lpush", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
        commands=["+@all", "-lpush"],
    )  # fmt: skip
    env = {**fleet_env, "EVALFLEET_BROKER_URL": own_redis.url}
    refusing = own_redis.url.replace(f":{own_redis.password}@", "no-lpush:pw@")
    log = shared_with_agents(tmp_path / "started.log")
    matrix = write_matrix(tmp_path, f'echo "$EVALFLEET_RUN_ID $$" >> {log}; touch out.txt', runs=6)
    refused = run_cli("submit", str(matrix), env={**env, "EVALFLEET_BROKER_URL": refusing})
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 1 and "Traceback" not in said, said
    found = re.search(r"after 0 of 6 runs of experiment (\S+) were sent", said)
    assert found is not None and "scheduler resume" in said, said
    exp_id = found[1]
    worker = Worker(env, tmp_path / "w.log", concurrency=2)
    try:
        resumed = run_cli("resume", exp_id, "--wait", "--format", "json", env=env, timeout=120)
    finally:
        worker.stop()
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["experiment"]["completed_runs"] == 6
    _each_ran_once(Store.from_url(own_redis.url, prefix=PREFIX), exp_id, log, runs=6)
    again = run_cli("resume", exp_id, env=env)
    assert "every run has a result; nothing to resume" in again.stderr, again.stderr


def test_a_broker_that_refuses_writes_mid_experiment_stops_nothing_for_good(
    fleet_env: dict[str, str], own_redis: RedisServer, tmp_path: Path
) -> None:
    """Redis full (maxmemory, noeviction) for 12 s while runs are in progress and
    queued: the workers and the follower wait (a full Redis refuses every MULTI, and
    kombu acked and recorded messages in one, which Celery called unrecoverable: the
    fleet exited), then every run ends with the result its agent earned."""
    env = {**fleet_env, "EVALFLEET_BROKER_URL": own_redis.url}
    log = shared_with_agents(tmp_path / "started.log")
    command = f'echo "$EVALFLEET_RUN_ID $$" >> {log}; sleep 2; touch out.txt'
    matrix = write_matrix(tmp_path, command, runs=16, lease_s=30)
    workers = [Worker(env, tmp_path / f"w{i}.log", name=f"w{i}") for i in range(2)]
    store = Store.from_url(own_redis.url, prefix=PREFIX)
    broker = redis.Redis.from_url(own_redis.url)
    broker.config_set("maxmemory-policy", "noeviction")
    follower = start_cli("submit", str(matrix), "--wait", "--json", env=env)
    try:
        wait_until(lambda: _results(store) >= 2, "two results", timeout=60)
        broker.config_set("maxmemory", 1)  # every write refused from now on
        time.sleep(12)
        assert all(w.proc.poll() is None for w in workers), "a worker exited"
        broker.config_set("maxmemory", 0)
        out, err = follower.communicate(timeout=180)
    finally:
        follower.kill()
        for worker in workers:
            worker.stop()
    assert follower.returncode == 0, err
    # The follower learns the broker is full only when a sweep of its writes (what
    # changed among the runs unaccounted for); when one did, it said so and waited.
    said = " ".join(err.split())
    assert "Traceback" not in said and "unreachable" not in said, said
    if "refuse" in said or "OOM" in said:
        assert "the broker is full and refuses writes" in said, said
    _each_ran_once(store, json.loads(out)["experiment"]["id"], log, runs=16)
    for i in range(2):
        assert "Unrecoverable error" not in (tmp_path / f"w{i}.log").read_text()


def test_a_worker_left_alone_with_a_full_broker_finishes_every_run_once_it_has_room(
    fleet_env: dict[str, str], own_redis: RedisServer, tmp_path: Path
) -> None:
    """One worker, and Redis full for longer than a run waits for it (about a minute),
    than a lease and than the worker's visibility timeout, with runs in progress and
    queued. Each run in progress gives up storing its result and rejects its message
    back to the queue, which the full broker refuses too. kombu kept each such message
    as delivered forever: two of them and the worker's prefetch was spent, so it never
    fetched again and the experiment stayed running until a second worker came. Now
    the same worker finishes every run once the broker has room, each recorded once
    with the outcome its agent earned, and its log says the broker is full in a line,
    without a traceback."""
    env = {**fleet_env, "EVALFLEET_BROKER_URL": own_redis.url, "EVALFLEET_SWEEP_S": "1"}
    log = shared_with_agents(tmp_path / "started.log")
    earned = "if [ $((EVALFLEET_RUN_INDEX % 2)) -eq 0 ]; then touch out.txt; fi"
    command = f'echo "$EVALFLEET_RUN_ID $$" >> {log}; sleep 3; {earned}'
    matrix = write_matrix(tmp_path, command, runs=10)
    # The worker's visibility timeout is short too: kombu's own restore of old messages
    # (refused while the broker is full) must not stop the worker either. A submit
    # refuses a matrix whose runs could outlast it: the submitter keeps the default.
    worker_env = {**env, "EVALFLEET_VISIBILITY_TIMEOUT": "10"}
    worker = Worker(worker_env, tmp_path / "w.log", concurrency=2)
    store = Store.from_url(own_redis.url, prefix=PREFIX)
    broker = redis.Redis.from_url(own_redis.url)
    broker.config_set("maxmemory-policy", "noeviction")
    follower = start_cli("submit", str(matrix), "--wait", "--json", env=env)
    try:
        wait_until(lambda: _results(store) >= 2, "two results", timeout=60)
        broker.config_set("maxmemory", 1)  # every write refused from now on
        time.sleep(75)  # the runs in progress give up on the broker after ~60 s
        assert worker.proc.poll() is None, "the worker exited"
        broker.config_set("maxmemory", 0)
        try:
            out, err = follower.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the experiment did not finish: {_where_runs_are(store)}")
    finally:
        follower.kill()
        worker.stop()
    assert follower.returncode == 0, err
    report = json.loads(out)
    exp_id = report["experiment"]["id"]
    runs = store.results.all(exp_id)
    assert sorted((r.run_index, r.passed) for r in runs) == [(i, i % 2 == 0) for i in range(10)]
    assert report["experiment"]["completed_runs"] == 10
    assert report["tiers"]["T0"]["runs"] == 10 and report["tiers"]["T0"]["passes"] == 5
    assert {r.worker for r in runs} == {r.worker for r in runs[:1]}  # the one worker
    # Every run's agent ran; a run whose result the full broker refused ran again.
    assert {line.split()[0] for line in started(log)} == {r.run_id for r in runs}
    said = worker.log.read_text()
    assert "Traceback" not in said and "CRITICAL" not in said, said[-5000:]
    assert "the broker is full and refuses writes" in said, said[-5000:]


def test_a_broker_set_to_lose_runs_is_named_at_submit_and_at_worker_start(
    fleet_env: dict[str, str], own_redis: RedisServer, tmp_path: Path
) -> None:
    env = {**fleet_env, "EVALFLEET_BROKER_URL": own_redis.url}
    broker = redis.Redis.from_url(own_redis.url)
    broker.config_set("maxmemory-policy", "allkeys-lru")
    broker.config_set("appendonly", "no")
    matrix = write_matrix(tmp_path, "touch out.txt", runs=1)
    submitted = run_cli("submit", str(matrix), env=env)
    assert submitted.returncode == 0, submitted.stderr
    said = " ".join(submitted.stderr.split())
    assert "evicts keys when it is full (maxmemory-policy allkeys-lru)" in said, said
    assert "set `maxmemory-policy noeviction` on it" in said
    assert "keeps nothing on disk" in said and "set `appendonly yes` on it" in said
    worker = Worker(env, tmp_path / "w.log")
    worker.stop()
    assert "maxmemory-policy allkeys-lru" in worker.log.read_text()

    broker.config_set("maxmemory-policy", "noeviction")
    broker.config_set("appendonly", "yes")
    tmp_path.chmod(0o700)  # nor the one on a matrix folder other users may read
    again = run_cli("submit", str(matrix), env=env)
    assert again.returncode == 0 and "warning" not in again.stderr, again.stderr


def test_a_run_that_redis_left_records_nothing_and_its_lease_brings_it_back(
    own_redis: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis away mid-run is not the run's fault: no "internal error" result is stored."""
    import worker.run
    from core.matrix import load_matrix
    from fleet.app import BROKER_DOWN
    from scheduler.plan import plan

    monkeypatch.setattr(worker.run, "_RETRY_WAITS_S", (0.2,))  # patience: 0.2 s, not 30 s
    monkeypatch.setenv("EVALFLEET_WORKDIR", str(tmp_path / "runs"))
    matrix = load_matrix(write_matrix(tmp_path, "sleep 2; touch out.txt", runs=1, lease_s=2))
    store = Store.from_url(own_redis.url, prefix=PREFIX)
    exp_id = f"left-{uuid.uuid4().hex[:6]}"
    spec = next(plan(matrix, exp_id))
    info = ExperimentInfo(id=exp_id, name="left", status=ExperimentStatus.running,
                          total_runs=1, created_at=time.time())  # fmt: skip
    store.experiments.create(info, matrix, [spec])

    def on_phase(phase: str) -> None:
        if phase == "gates":  # a Redis call mid-run, as Celery's progress events make
            try:
                store.redis.ping()
            finally:
                own_redis.start()  # back before the run could store anything

    threading.Timer(0.5, own_redis.stop).start()  # Redis goes while the agent runs
    with pytest.raises(BROKER_DOWN):
        worker.run.execute(spec, store, on_phase)

    assert (
        store.results.get(exp_id, spec.run_id) is None
        and store.experiments.info(exp_id).completed_runs == 0
    )
    wait_until(lambda: not store.leases.live(exp_id), "the lease to expire", timeout=10)
    assert store.results.claim_lost(exp_id) == [spec]  # the sweep sends it again


def _where_runs_are(store: Store) -> str:
    exp_id = store.experiments.latest()
    assert exp_id is not None
    keys = store.redis.keys(f"{PREFIX}exp:{exp_id}*")
    return json.dumps(
        {
            "info": store.experiments.info(exp_id).model_dump(mode="json"),
            "unfinished": sorted(store.results.unfinished(exp_id)),
            "keys": sorted(keys),
            "leases": store.redis.hgetall(f"{PREFIX}exp:{exp_id}:leases"),
            "unaccounted": store.redis.hgetall(f"{PREFIX}exp:{exp_id}:unaccounted"),
            "queues": {
                k: store.redis.llen(k)
                for k in store.redis.keys("*")
                if store.redis.type(k) == "list"
            },
            "unacked": {
                tag: [
                    json.loads(raw)[0]["headers"].get("argsrepr"),
                    store.redis.zscore("unacked_index", tag),
                ]
                for tag, raw in store.redis.hgetall("unacked").items()
            },
            "now": time.time(),
        },
        indent=1,
    )


def _results(store: Store) -> int:
    try:
        latest = store.experiments.latest()
        return store.experiments.info(latest).completed_runs if latest else 0
    except redis.RedisError:
        return 0


def test_embedded_stack_killed_mid_experiment_resumes_from_its_aof(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    """kill -9 of the CLI, its Redis and its workers; `resume` reopens the AOF and finishes."""
    env = {k: v for k, v in fleet_env.items() if k != "EVALFLEET_BROKER_URL"}
    log = shared_with_agents(tmp_path / "started.log")
    command = f'echo "$EVALFLEET_RUN_ID $$" >> {log}; sleep 2; touch out.txt'
    matrix = write_matrix(tmp_path / "m", command, runs=6)
    home = tmp_path / "home"
    home.mkdir()
    cli = start_cli(
        "submit", str(matrix), "--workers", "2", env=env, cwd=home,
        stdout=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    state = home / ".evalfleet" / "redis.json"
    try:
        url = wait_until(lambda: running_embedded_broker(state.parent), "the embedded Redis", 30)
        store = Store.from_url(url, prefix=PREFIX)
        wait_until(lambda: _results(store) >= 2, "two results", timeout=60)
        time.sleep(1.5)  # AOF `everysec`: let the results reach the disk
        exp_id = store.experiments.latest()
        assert exp_id is not None
        kept = {r.run_id: r for r in store.results.all(exp_id)}
        _kill_tree(cli.pid)
        kill_agents(started(log))
    finally:
        _kill_tree(cli.pid)

    resumed = run_cli("resume", exp_id, "--workers", "2", "--format", "json", env=env, cwd=home)
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["experiment"]["completed_runs"] == report["experiment"]["total_runs"] == 6
    assert report["tiers"]["T0"]["passes"] == 6
    reopened = run_cli("report", exp_id, "--format", "json", "--runs", env=env, cwd=home)
    runs = json.loads(reopened.stdout)["runs"]
    assert len(runs) == 6 and len({r["run_id"] for r in runs}) == 6
    for run in runs:  # what was stored before the crash was kept, not re-run
        if run["run_id"] in kept:
            assert run == kept[run["run_id"]].model_dump(mode="json")


def _kill_tree(pid: int) -> None:
    """SIGKILL a process, everything it started (in any session), and their groups."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    todo, found = [pid], []
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    for target in found:
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(target, signal.SIGKILL)


def test_a_command_that_meets_the_broker_full_mid_way_says_so_in_one_line(
    fleet_env: dict[str, str], own_redis: RedisServer, tmp_path: Path
) -> None:
    """`cancel` reaches the broker, then its first write is refused (maxmemory,
    noeviction): one line naming the cause, the fix and the command to run again, exit
    1, no traceback. Once there is room, that command cancels it."""
    env = {**fleet_env, "EVALFLEET_BROKER_URL": own_redis.url}
    sent = run_cli("submit", str(write_matrix(tmp_path, "true", runs=2)), env=env)
    assert sent.returncode == 0, sent.stderr
    exp_id = sent.stdout.strip()
    full = leave_room(own_redis, 0)
    refused = run_cli("cancel", exp_id, env=env)
    assert refused.returncode == 1, refused.stderr
    said = " ".join(refused.stderr.split())
    assert "Traceback" not in said, said
    assert said.startswith("error: the broker is full and refuses writes ("), said
    assert "OOM command not allowed" in said
    assert said.endswith(
        f"free memory on it or raise its maxmemory; `scheduler cancel {exp_id}` again records "
        "the rest"
    ), said
    full.config_set("maxmemory", 0)
    again = run_cli("cancel", exp_id, env=env)
    assert again.returncode == 0, again.stderr
    assert Store.from_url(own_redis.url, prefix=PREFIX).experiments.info(exp_id).status == (
        ExperimentStatus.cancelled
    )
