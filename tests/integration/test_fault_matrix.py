"""The fault matrix, swept: each broker fault x each worker fault x the phase it hits.

Broker faults, on a redis-server of the cell's own (the session's Redis is never
made full or stopped):

- full: `maxmemory` below use (noeviction), every write refused;
- down: the server killed, then started again with its data (AOF);
- lost: the server killed, then started again keeping nothing on disk;
- partitioned: the fleet reaches the server through a proxy that stops forwarding
  and then drops every connection (tests.support.partition).

Worker faults: none; killed (SIGKILL of the whole worker; another is started, as a
supervisor would); frozen (SIGSTOP, then SIGCONT after longer than the lease and
the worker's visibility timeout).

Phases: `runs`, with one run held in its setup, one in its agent and one in its
gates (each blocks until the test creates a file: no sleeps choose the moment)
and one still queued; `finish`, every run stored and the chord body taken by a
worker whose pool the test holds, so the aggregate runs into the fault.

Every cell asserts the promise of docs/RELIABILITY.md: every run ends once with the
outcome its agent earned (even runs pass, odd runs fail), no command and no worker
prints a traceback, and the experiment completes by itself; where the broker lost
it, what the commands say is the documented answer.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from core.results.report import submitted_at
from core.store import Store, keys
from fleet.sending import AGGREGATE_TASK
from tests.conftest import PREFIX, QUEUE, Worker, run_cli, shared_with_agents, start_cli
from tests.support.fleet import RedisServer, wait_until
from tests.support.partition import Partition

pytestmark = pytest.mark.integration

BROKER_FAULTS = ("full", "down", "lost", "partitioned")
WORKER_FAULTS = ("none", "killed", "frozen")
RUNS = 4
LEASE_S = 3
VISIBILITY_S = 4  # the workers' (a submit keeps the default: it refuses runs longer)
FAULT_S = 5  # longer than a lease and than the visibility timeout
RUN_QUEUE = f"{QUEUE}-runs"  # the finish cells' runs; their chord body goes to QUEUE


@dataclass
class Broker:
    """The cell's redis-server, the fault it suffers, and the URL the fleet uses."""

    fault: str
    server: RedisServer
    partition: Partition | None = None

    @property
    def url(self) -> str:
        if self.partition is not None:
            return self.partition.url(self.server.password)
        return self.server.url

    @functools.cached_property
    def direct(self) -> redis.Redis:
        """The test's own view, past any partition."""
        return redis.Redis.from_url(self.server.url)

    def hit(self) -> None:
        if self.fault == "full":
            self.direct.config_set("maxmemory-policy", "noeviction")
            self.direct.config_set("maxmemory", 1)
        elif self.fault in ("down", "lost"):
            self.server.stop()
        else:
            assert self.partition is not None
            self.partition.cut()

    def mend(self) -> None:
        if self.fault == "full":
            self.direct.config_set("maxmemory", 0)
        elif self.fault in ("down", "lost"):
            self.server.start()
        else:
            assert self.partition is not None
            self.partition.heal()


@pytest.fixture
def broker(broker_fault: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """The cell's broker (its test's `broker_fault` parameter says which fault)."""
    # Not in the test's folder, where its matrix is: a submit would send Redis's files.
    server = RedisServer(
        tmp_path_factory.mktemp("redis"), uuid.uuid4().hex, persistent=broker_fault != "lost"
    )
    partition = Partition(server.port) if broker_fault == "partitioned" else None
    try:
        yield Broker(broker_fault, server, partition)
    finally:
        if partition is not None:
            partition.close()
        server.stop()


@dataclass
class Fleet:
    """The cell's workers, commands and what they printed."""

    env: dict[str, str]
    folder: Path
    workers: list[Worker] = field(default_factory=list)
    said: list[str] = field(default_factory=list)  # every command's stderr
    background: ThreadPoolExecutor = field(default_factory=ThreadPoolExecutor)

    def worker(
        self, name: str, queues: str, sweep_s: float, concurrency: int, ready: bool = True
    ) -> Worker:
        """A worker on `queues`; `sweep_s`: its recovery sweeps' interval."""
        env = {
            **self.env,
            "EVALFLEET_SWEEP_S": str(sweep_s),
            "EVALFLEET_VISIBILITY_TIMEOUT": str(VISIBILITY_S),
        }
        log = self.folder / f"{name}.log"
        worker = Worker(env, log, concurrency, queues, name, ready=ready)
        self.workers.append(worker)
        return worker

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = run_cli(*args, env=self.env, timeout=120)
        self.said.append(done.stderr)
        return done

    def asking(self, *args: str) -> Future[subprocess.CompletedProcess[str]]:
        """A command run in the background, as a user asks while the fault lasts."""
        return self.background.submit(self.cli, *args)

    def stop(self) -> None:
        self.background.shutdown(cancel_futures=True)
        for worker in self.workers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.proc.pid, signal.SIGCONT)  # a frozen one stops too
            worker.stop()

    def assert_standing(self, killed: Worker | None) -> None:
        """Every worker but the one the test killed is still up."""
        for worker in self.workers:
            if worker is not killed:
                assert worker.proc.poll() is None, worker.log.read_text()[-3000:]

    def assert_no_traceback(self) -> None:
        for worker in self.workers:
            said = worker.log.read_text(errors="replace")
            assert "Traceback" not in said, f"{worker.log}:\n{_around_traceback(said)}"
        for said in self.said:
            assert "Traceback" not in said, said


def assert_a_clear_answer(asked: Future[subprocess.CompletedProcess[str]]) -> None:
    """A command that met the fault: its answer, or one line saying why not (the broker
    unreachable, or the experiment lost), with its exit status."""
    done = asked.result(timeout=120)
    assert done.returncode in (0, 1, 2), done
    if done.returncode:
        assert done.stderr.startswith("error: ") and "\n" not in done.stderr.strip(), done


def _around_traceback(text: str) -> str:
    at = text.index("Traceback")
    return text[max(0, at - 1500) : at + 3000]


@pytest.fixture
def fleet(fleet_env: dict[str, str], broker: Broker, tmp_path: Path) -> Iterator[Fleet]:
    cell = Fleet({**fleet_env, "EVALFLEET_BROKER_URL": broker.url}, tmp_path)
    try:
        yield cell
    finally:
        cell.stop()


def hold(index: int, phase: str, arrived: Path, release: Path) -> str:
    """Shell that holds run `index` in its `phase` until `release` exists, once it has
    said it arrived. Other runs, and a run sent again after the release, go on."""
    return (
        f'if [ "$EVALFLEET_RUN_INDEX" = {index} ] && [ ! -e {release} ]; then '
        f'echo "{index} {phase}" >> {arrived}; '
        f"until [ -e {release} ]; do sleep 0.05; done; fi"
    )


def write_matrix(folder: Path, arrived: Path, release: Path, queue: str = "") -> Path:
    """Even runs pass, odd runs fail (their agent leaves no out.txt); run 0 is held in
    its setup, run 1 in its agent, run 2 in its gates."""
    earned = "if [ $((EVALFLEET_RUN_INDEX % 2)) -eq 0 ]; then touch out.txt; fi"
    agent = f"{hold(1, 'agent', arrived, release)}; {earned}"
    gate = f"{hold(2, 'gates', arrived, release)}; true"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "matrix.yaml"
    path.write_text(f"""
name: fault-matrix
runs_per_tier: {RUNS}
lease_s: {LEASE_S}
{f"queue: {queue}" if queue else ""}
agent: {{kind: command, command: {json.dumps(agent)}, timeout_s: 60}}
tiers: [{{id: T0}}]
scenarios:
  - id: s
    prompt: go
    setup: [{json.dumps(hold(0, "setup", arrived, release))}]
    evaluation:
      gates:
        - {{type: command_succeeds, command: {json.dumps(gate)}}}
        - {{type: file_exists, path: out.txt}}
""")
    return path


def arrivals(arrived: Path) -> set[str]:
    return {line.split()[1] for line in arrived.read_text().splitlines()}


def hit_worker(fault: str, worker: Worker) -> None:
    if fault == "killed":
        os.killpg(worker.proc.pid, signal.SIGKILL)
    elif fault == "frozen":
        os.killpg(worker.proc.pid, signal.SIGSTOP)


def mend_worker(fault: str, worker: Worker, fleet: Fleet, queues: str) -> None:
    if fault == "killed":  # a supervisor starts another in its place
        fleet.worker("replacement", queues, sweep_s=1, concurrency=3)
    elif fault == "frozen":
        os.killpg(worker.proc.pid, signal.SIGCONT)


def past_a_lost_experiments_stamp(exp_id: str) -> None:
    """The id tells its submit time to the second: a restart within the same few seconds
    cannot be told to have come after it (test_faults' restart test says the same)."""
    time.sleep(max(0.0, (submitted_at(exp_id) or 0) + 3.5 - time.time()))


def assert_each_run_earned(store: Store, exp_id: str) -> None:
    runs = store.results.all(exp_id)
    assert sorted((r.run_index, r.passed) for r in runs) == [
        (i, i % 2 == 0) for i in range(RUNS)
    ], [(r.run_index, r.status, r.fail_reason) for r in runs]
    info = store.experiments.info(exp_id)
    assert (info.completed_runs, info.passes, info.errors) == (RUNS, RUNS // 2, 0), info
    report = store.reports.get(exp_id)
    assert report is not None
    assert (report.tiers["T0"].runs, report.tiers["T0"].passes) == (RUNS, RUNS // 2)


def assert_complete(fleet: Fleet, store: Store, exp_id: str) -> None:
    assert_each_run_earned(store, exp_id)
    status = fleet.cli("status", exp_id)
    assert status.returncode == 0, status.stderr
    [row] = [line for line in status.stdout.splitlines() if line.startswith(exp_id)]
    assert row.split()[1] == "complete", status.stdout
    report = fleet.cli("report", exp_id, "--format", "json")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["experiment"]["status"] == "complete"


def assert_lost_as_documented(
    fleet: Fleet, broker: Broker, exp_id: str, worker: Worker | None, dropped: list[str]
) -> None:
    """test_faults.py::test_a_restart_that_lost_the_experiment_...: what the `worker`
    held of the experiment is dropped, each in a line naming the restart (`dropped`:
    the run ids, or `report`), nothing of it is written back, and each command names
    the restart and the fix, exit 2."""
    if worker is not None:
        lines = [f"{what} dropped: no experiment '{exp_id}'" for what in dropped]
        wait_until(
            lambda: all(line in worker.log.read_text() for line in lines),
            f"{dropped} dropped",
            timeout=90,
        )
    assert list(broker.direct.scan_iter(match=f"*{exp_id}*")) == []
    for command in (["status", exp_id], ["report", exp_id], ["resume", exp_id]):
        answered = fleet.cli(*command)
        said = " ".join(answered.stderr.split())
        assert answered.returncode == 2, (command, said)
        assert "and the broker restarted at" in said and "which lost it" in said, said
        assert "set `appendonly yes` on the broker" in said, said


@pytest.mark.parametrize("worker_fault", WORKER_FAULTS)
@pytest.mark.parametrize("broker_fault", BROKER_FAULTS)
def test_a_fault_while_runs_are_in_setup_agent_and_gates(
    broker_fault: str, worker_fault: str, broker: Broker, fleet: Fleet, tmp_path: Path
) -> None:
    arrived = shared_with_agents(tmp_path / "arrived.log")
    release = tmp_path / "release"
    matrix = write_matrix(tmp_path / "m", arrived, release)
    follower = start_cli("submit", str(matrix), "--wait", "--json", env=fleet.env)
    worker = fleet.worker("worker", QUEUE, sweep_s=1, concurrency=3)
    store = Store.from_url(broker.server.url, prefix=PREFIX)
    try:
        wait_until(
            lambda: arrivals(arrived) == {"setup", "agent", "gates"},
            "a run in each of setup, agent and gates",
            timeout=90,
        )
        exp_id = store.experiments.latest()
        assert exp_id is not None
        if broker_fault == "lost":
            past_a_lost_experiments_stamp(exp_id)
        broker.hit()
        hit_worker(worker_fault, worker)
        release.touch()  # the held runs go on into the fault
        asked = fleet.asking("status", exp_id)
        time.sleep(FAULT_S)
        broker.mend()
        mend_worker(worker_fault, worker, fleet, QUEUE)
        out, err = follower.communicate(timeout=150)
        assert_a_clear_answer(asked)
    finally:
        follower.kill()
    fleet.said.append(err)
    if broker_fault == "lost":
        assert follower.returncode == 2, err
        assert "which lost it" in " ".join(err.split()), err
        held = [f"run {exp_id}:T0:s:{i}" for i in range(3)]  # in flight; run 3 was queued
        in_flight = None if worker_fault == "killed" else worker
        assert_lost_as_documented(fleet, broker, exp_id, in_flight, held)
    else:
        assert follower.returncode == 0, err
        assert json.loads(out)["experiment"]["completed_runs"] == RUNS
        assert_complete(fleet, store, exp_id)
    fleet.assert_standing(killed=worker if worker_fault == "killed" else None)
    fleet.assert_no_traceback()


def pool_processes(worker: Worker) -> list[int]:
    """The worker's pool processes: its main process's children."""
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(stat[1]) == worker.proc.pid:
                    children.append(int(entry.name))
    return children


def body_taken(client: redis.Redis, runner: Worker) -> bool:
    """The chord body is out of its queue and among the unacknowledged, and every run's
    task has returned: the last one sends the body and then still tidies the chord's
    keys (Celery's), which a fault must not meet, or it hits another phase."""
    said = runner.log.read_text()
    if said.count("Task evalfleet.run[") < 2 * RUNS or said.count("] succeeded in") < RUNS:
        return False
    if client.llen(keys.queue_key(QUEUE)):
        return False
    return any(
        keys.task_args(keys.unacked_message(raw), AGGREGATE_TASK) is not None
        for raw in client.hvals(keys.UNACKED)
    )


@pytest.mark.parametrize("worker_fault", WORKER_FAULTS)
@pytest.mark.parametrize("broker_fault", BROKER_FAULTS)
def test_a_fault_at_the_finish(
    broker_fault: str, worker_fault: str, broker: Broker, fleet: Fleet, tmp_path: Path
) -> None:
    """Every run stored, the chord body taken by the finishing worker, whose pool
    processes the test holds (SIGSTOP) so that the aggregate has not begun. The
    fault hits; `none` lets the aggregate run into it at once."""
    arrived = shared_with_agents(tmp_path / "arrived.log")
    release = tmp_path / "release"
    release.touch()  # no run is held
    matrix = write_matrix(tmp_path / "m", arrived, release, queue=RUN_QUEUE)
    # No sweeps: the chord body is the only way the experiment finishes until the fault.
    runner = fleet.worker("runner", RUN_QUEUE, sweep_s=3600, concurrency=2, ready=False)
    finisher = fleet.worker("finisher", QUEUE, sweep_s=3600, concurrency=1, ready=False)
    for worker in (runner, finisher):  # both start at once: a start takes seconds
        worker.wait_ready()
    held = pool_processes(finisher)
    assert held, "the finishing worker has no pool process"
    for pid in held:
        os.kill(pid, signal.SIGSTOP)
    store = Store.from_url(broker.server.url, prefix=PREFIX)
    submitted = fleet.cli("submit", str(matrix))
    assert submitted.returncode == 0, submitted.stderr
    exp_id = submitted.stdout.strip()
    try:
        wait_until(
            lambda: body_taken(broker.direct, runner), "the chord body to be taken", timeout=90
        )
        assert store.experiments.info(exp_id).completed_runs == RUNS
        assert store.reports.get(exp_id) is None
        if broker_fault == "lost":
            past_a_lost_experiments_stamp(exp_id)
        broker.hit()
        if worker_fault == "none":
            for pid in held:
                os.kill(pid, signal.SIGCONT)  # the aggregate meets the fault
        hit_worker(worker_fault, finisher)
        asked = fleet.asking("status", exp_id)
        time.sleep(FAULT_S)
        broker.mend()
        if worker_fault == "frozen":
            for pid in held:
                os.kill(pid, signal.SIGCONT)
        mend_worker(worker_fault, finisher, fleet, QUEUE)
        if broker_fault != "lost":
            wait_until(lambda: store.reports.get(exp_id), "the report", timeout=90)
        assert_a_clear_answer(asked)
    finally:
        for pid in held:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    if broker_fault == "lost":
        holding = None if worker_fault == "killed" else finisher
        assert_lost_as_documented(fleet, broker, exp_id, holding, [f"the report of {exp_id}"])
    else:
        assert_complete(fleet, store, exp_id)
    fleet.assert_standing(killed=finisher if worker_fault == "killed" else None)
    fleet.assert_no_traceback()
