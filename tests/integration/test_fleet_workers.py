"""Workers as a fleet runs them: until idle, leaving on SIGTERM, and queues.

Every worker here is the real `scheduler worker` CLI, as a CI job starts it,
against the test Redis; experiments go in through `scheduler submit`.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import secrets
import select
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis

from core.results.run import RunStatus
from core.store import Store
from scheduler.embedded import redis_server_binary
from tests.conftest import QUEUE, Worker, _own_unacked, run_cli, shared_with_agents
from tests.support.experiments import command_matrix
from tests.support.fleet import (
    Service,
    alive,
    cli_worker,
    executable,
    free_port,
    services,
    wait_until,
)

pytestmark = pytest.mark.integration


def _submit(matrix: Path, env: dict[str, str]) -> str:
    submitted = run_cli("submit", str(matrix), env=env)
    assert submitted.returncode == 0, submitted.stderr
    return submitted.stdout.strip()


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _own_queue(fleet_env: dict[str, str], name: str) -> dict[str, str]:
    """The fleet's environment with a queue of the test's own: a message an earlier test
    of the session left in the session's queue would keep an until-idle worker busy."""
    return {**fleet_env, "EVALFLEET_QUEUE": f"{QUEUE}-{name}"}  # the conftest removes it


@pytest.mark.parametrize("split", [[], ["--split"]], ids=["one-node", "split"])
def test_until_idle_worker_drains_the_experiment_then_exits_zero(
    fleet_env: dict[str, str], store: Store, tmp_path: Path, split: list[str]
) -> None:
    """`--split`: each of the two slots a node of its own, both draining the queue, and
    the process that forked them leaving 0 once both have."""
    env = _own_queue(fleet_env, f"drain{len(split)}")
    # Each run outlasts the idle window: a busy worker must not count as idle.
    exp_id = _submit(command_matrix(tmp_path, "sleep 2; touch out.txt", runs=3), env)
    started = time.monotonic()
    worker = subprocess.run(
        [executable("scheduler"), "worker", "--concurrency", "2", "--until-idle", "1.5", *split],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert worker.returncode == 0, worker.stderr[-3000:]
    assert "until-idle" in worker.stderr and "shutting down" in worker.stderr
    nodes = set(re.findall(r"\] (\S+@\S+) ready\.", worker.stderr))
    assert len(nodes) == (2 if split else 1), nodes
    assert worker.stderr.count("until-idle: no task") == len(nodes)  # each left by itself
    # It left only after every run and the aggregation were done.
    report = store.reports.get(exp_id)
    assert report is not None and report.experiment.status.value == "complete"
    assert store.experiments.info(exp_id).completed_runs == 3
    assert time.monotonic() - started < 120


def test_until_idle_worker_with_nothing_to_do_exits_zero_by_itself(
    fleet_env: dict[str, str],
) -> None:
    idle = subprocess.run(
        [executable("scheduler"), "worker", "--concurrency", "1", "--until-idle", "1"],
        env=_own_queue(fleet_env, "idle"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert idle.returncode == 0, idle.stderr[-3000:]
    if os.geteuid() == 0:
        # Celery's advice to a worker run as root, `--uid`, would run every agent as the
        # worker's user: the runs' own users are why it runs as root.
        assert "superuser" not in idle.stderr and "--uid" not in idle.stderr, idle.stderr


def test_an_until_idle_worker_sends_again_a_run_a_dead_worker_held_before_it_leaves(
    fleet_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    """A CI job's worker started after another died mid-run: the dead worker's run is in
    no queue (its message waits, unacknowledged, for the broker's visibility timeout,
    hours), so only a sweep sends it again. One comes every EVALFLEET_SWEEP_S (10 s by
    default); a worker idle for 1 s left before its first, the run lost."""
    env = _own_queue(fleet_env, "lost")
    log = shared_with_agents(tmp_path / "started.log")
    command = f'echo "$EVALFLEET_RUN_ID $$" >> {log}; sleep 3; touch out.txt'
    matrix = command_matrix(tmp_path / "m", command, runs=1, extra="lease_s: 3\n")
    doomed = Worker(env, tmp_path / "doomed.log", concurrency=1, queues=env["EVALFLEET_QUEUE"])
    try:
        exp_id = _submit(matrix, env)
        line = wait_until(lambda: _lines(log), "the run to start", timeout=120)[0]
        os.killpg(doomed.proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(line.split()[1]), signal.SIGKILL)  # its agent, in a group of its own
    finally:
        doomed.stop()
    time.sleep(3 + 1)  # the lease lapses: the run is lost, not in progress
    worker = subprocess.run(
        [executable("scheduler"), "worker", "--concurrency", "1", "--until-idle", "1"],
        env={k: v for k, v in env.items() if k != "EVALFLEET_SWEEP_S"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert worker.returncode == 0, worker.stderr[-3000:]
    [run] = store.results.all(exp_id)
    assert run.passed and run.attempts == 2, (run.fail_reason, run.attempts)
    assert len(_lines(log)) == 2  # the dead worker's try, then this worker's
    report = store.reports.get(exp_id)
    assert report is not None and report.experiment.status.value == "complete"


def _labelled_worker(env: dict[str, str], folder: Path, label: str, *args: str) -> Service:
    """A `scheduler worker` whose agents see WORKER_LABEL, to tell who ran what."""
    return cli_worker({**env, "WORKER_LABEL": label}, folder / f"{label}.log", *args, name=label)


def _slow_agent(tmp_path: Path) -> tuple[str, Path, Path]:
    """An agent that logs its start (worker label, its pid) and its end, 6 s apart."""
    started = shared_with_agents(tmp_path / "started")
    finished = shared_with_agents(tmp_path / "finished")
    command = (
        f'echo "$WORKER_LABEL $$" >> {started}; sleep 6; touch out.txt; '
        f'echo "$WORKER_LABEL" >> {finished}'
    )
    return command, started, finished


def test_sigterm_past_the_grace_hands_the_run_back_and_another_worker_runs_it(
    fleet_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    command, started, finished = _slow_agent(tmp_path)
    with services() as fleet:
        leaving = _labelled_worker(fleet_env, tmp_path, "a", "--concurrency", "1", "--grace", "1")
        fleet.append(leaving)
        exp_id = _submit(
            command_matrix(tmp_path, command, runs=1, pass_env=["WORKER_LABEL"]), fleet_env
        )
        wait_until(lambda: _lines(started), "the run to start on the first worker")
        # A cancelled CI job: the whole process group gets SIGTERM, while the run has most
        # of its 6 s to go (starting the second worker first could take them all on a busy
        # machine, and the run would end within the grace).
        leaving.signal(signal.SIGTERM, group=True)
        assert leaving.wait(timeout=60) == 0, leaving.output()[-3000:]
        first_agent_pid = int(_lines(started)[0].split()[1])
        assert not alive(first_agent_pid)  # its agent was stopped, not left running
        # The run handed back waits in its queue for the next worker.
        fleet.append(_labelled_worker(fleet_env, tmp_path, "b", "--concurrency", "1"))
        wait_until(lambda: store.reports.get(exp_id), "the experiment's report", timeout=90)

    assert [line.split()[0] for line in _lines(started)] == ["a", "b"]
    assert _lines(finished) == ["b"]
    [run] = store.results.all(exp_id)
    assert run.status == RunStatus.completed and run.passed
    assert run.attempts == 2  # the handed-back delivery, then the one that finished
    # The first delivery as it ended: handed back by its leaving worker, not lost.
    first, _ = store.attempts.of(exp_id, run.run_id)
    handed = "handed back (worker shutting down, 1 s grace over): back to its queue"
    assert first.outcome == handed, first
    shown = " ".join(run_cli("show", run.run_id, env=fleet_env).stdout.split())
    assert handed in shown, shown
    info = store.experiments.info(exp_id)
    assert info.completed_runs == info.total_runs == 1 and info.passes == 1
    report = store.reports.get(exp_id)
    assert report is not None and report.tiers["T0"].runs == 1


def test_sigterm_within_the_grace_lets_the_run_finish_on_the_same_worker(
    fleet_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    command, started, finished = _slow_agent(tmp_path)
    with services() as fleet:
        leaving = _labelled_worker(fleet_env, tmp_path, "a", "--concurrency", "1", "--grace", "60")
        fleet.append(leaving)
        exp_id = _submit(
            command_matrix(tmp_path, command, runs=1, pass_env=["WORKER_LABEL"]), fleet_env
        )
        wait_until(lambda: _lines(started), "the run to start on the first worker")
        fleet.append(_labelled_worker(fleet_env, tmp_path, "b", "--concurrency", "1"))
        # `kill PID` or `docker stop`: only the main process gets SIGTERM.
        leaving.signal(signal.SIGTERM)
        assert leaving.wait(timeout=60) == 0, leaving.output()[-3000:]
        assert _lines(finished) == ["a"]  # it finished before the worker exited
        wait_until(lambda: store.reports.get(exp_id), "the experiment's report", timeout=90)

    assert [line.split()[0] for line in _lines(started)] == ["a"]
    [run] = store.results.all(exp_id)
    assert run.status == RunStatus.completed and run.attempts == 1
    assert store.experiments.info(exp_id).completed_runs == 1


def test_runs_go_to_the_queue_their_tier_or_scenario_names(
    fleet_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    gpu = f"{QUEUE}-gpu"  # unique to the session, and removed with its keys
    log = shared_with_agents(tmp_path / "ran")
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(f"""
name: routing
runs_per_tier: 2
agent:
  kind: command
  command: 'echo "$EVALFLEET_TIER $EVALFLEET_SCENARIO $WORKER_LABEL" >> {log}; touch out.txt'
  pass_env: [WORKER_LABEL]
tiers:
  - id: T0
  - id: T1
    queue: {gpu}
scenarios:
  - id: plain
    prompt: go
    evaluation: {{gates: [{{type: file_exists, path: out.txt}}]}}
  - id: licensed
    prompt: go
    queue: {gpu}
    evaluation: {{gates: [{{type: file_exists, path: out.txt}}]}}
""")
    with services() as fleet:
        fleet.append(_labelled_worker(fleet_env, tmp_path, "cpu", "-c", "1"))
        fleet.append(_labelled_worker(fleet_env, tmp_path, "gpu", "-c", "1", "--queues", gpu))
        done = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
        assert done.returncode == 0, done.stderr
    exp_id = json.loads(done.stdout)["experiment"]["id"]

    ran = [line.split() for line in _lines(log)]
    assert len(ran) == 8
    where: dict[tuple[str, str], set[str]] = {}
    for tier, scenario, label in ran:
        where.setdefault((tier, scenario), set()).add(label)
    assert where == {
        ("T0", "plain"): {"cpu"},  # no queue named: the default queue
        ("T0", "licensed"): {"gpu"},  # the scenario's queue
        ("T1", "plain"): {"gpu"},  # the tier's queue
        ("T1", "licensed"): {"gpu"},  # the tier's queue (it wins over the scenario's)
    }
    assert {s.queue for s in store.specs.all(exp_id) if s.tier == "T1"} == {gpu}
    assert store.experiments.info(exp_id).completed_runs == 8


def _certificate_authority(folder: Path) -> Path:
    folder.mkdir()
    _openssl(
        folder, "req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=ca -keyout ca.key -out ca.crt"
    )
    return folder / "ca.crt"


def _server_certificate(ca: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1, signed by `ca`."""
    folder = ca.parent
    (folder / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl(
        folder, "req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server.key -out server.csr"
    )
    _openssl(
        folder,
        "x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 "
        "-extfile san.cnf -out server.crt",
    )
    return folder / "server.crt", folder / "server.key"


def _openssl(cwd: Path, args: str) -> None:
    subprocess.run(["openssl", *args.split()], cwd=cwd, check=True, capture_output=True)


def _tls_redis_server() -> str:
    """A redis-server built with TLS: the bundled Redis 6 (first on PATH in an
    activated venv) is not; a system one usually is."""
    for folder in os.environ["PATH"].split(os.pathsep):
        candidate = Path(folder) / "redis-server"
        if candidate.is_file():
            version = subprocess.run([candidate, "--version"], capture_output=True, text=True)
            if "v=6." not in version.stdout:
                return str(candidate)
    return redis_server_binary()


def test_a_tls_broker_with_a_password_serves_submit_and_workers(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    ca = _certificate_authority(tmp_path / "ca")
    cert, key = _server_certificate(ca)
    password, port = secrets.token_hex(8), free_port()
    with services() as fleet:
        flags = {
            "--port": "0",
            "--tls-port": str(port),
            "--tls-cert-file": str(cert),
            "--tls-key-file": str(key),
            "--tls-ca-cert-file": str(ca),
            "--tls-auth-clients": "no",
            "--requirepass": password,
            "--bind": "127.0.0.1",
            "--save": "",
        }
        command = [_tls_redis_server(), *(part for flag in flags.items() for part in flag)]
        server = Service(command, fleet_env, tmp_path / "redis.log", cwd=tmp_path)
        fleet.append(server)
        try:
            server.wait_for("Ready to accept connections")
        except AssertionError:
            pytest.skip(f"this redis-server cannot serve TLS: {server.output()[-500:]}")
        # No ssl_cert_reqs: evalfleet verifies the certificate by default.
        url = f"rediss://:{password}@127.0.0.1:{port}/0?ssl_ca_certs={ca}"
        env = {**fleet_env, "EVALFLEET_BROKER_URL": url}
        fleet.append(cli_worker(env, tmp_path / "worker.log", "--concurrency", "1"))
        matrix = command_matrix(tmp_path, "touch out.txt", runs=2)
        done = run_cli("submit", str(matrix), "--wait", "--json", env=env)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["experiment"]["status"] == "complete"
        assert report["experiment"]["completed_runs"] == 2

        # A server whose certificate another CA signed is refused, clearly.
        stranger = _certificate_authority(tmp_path / "other-ca")
        elsewhere = f"rediss://:{password}@127.0.0.1:{port}/0?ssl_ca_certs={stranger}"
        refused = run_cli("status", "--broker", elsewhere, env=fleet_env)
        assert refused.returncode == 1
        assert "cannot reach the broker" in refused.stderr and "certificate" in refused.stderr
        assert password not in refused.stderr


def test_two_workers_on_one_machine_get_distinct_node_names_by_default(
    fleet_env: dict[str, str], tmp_path: Path, redis_url: str
) -> None:
    from celery import Celery

    with services() as fleet:
        for index in range(2):  # no --hostname: the default must tell them apart
            worker = Service(
                ["scheduler", "worker", "--concurrency", "1", "--queues", QUEUE],
                fleet_env,
                tmp_path / f"worker{index}.log",
            )
            fleet.append(worker)
            worker.wait_for("ready.")
        host = socket.gethostname()
        names = {f"evalfleet-{worker.pid}@{host}" for worker in fleet}
        assert len(names) == 2
        # Celery's own broadcast, as Flower sees the fleet (other sessions' workers
        # may answer too on a shared Redis).
        control = Celery(broker=redis_url, set_as_current=False).control

        def both_answer() -> bool:
            replies = control.ping(timeout=2.0)
            return names <= {name for reply in replies for name in reply}

        wait_until(both_answer, "both workers answering a ping under their own names")
        for worker in fleet:
            assert "DuplicateNodenameWarning" not in worker.output()


def _logged_at(log: str, text: str) -> float:
    """When the worker's log first says `text`: seconds of the day, from Celery's stamp
    ([2026-01-02 03:04:05,678: LEVEL/Process] text)."""
    line = next(line for line in log.splitlines() if text in line)
    stamp = re.match(r"\[\S+ (\d+):(\d+):(\d+),(\d+):", line)
    assert stamp is not None, line
    hours, minutes, seconds, millis = (int(part) for part in stamp.groups())
    return hours * 3600 + minutes * 60 + seconds + millis / 1000


def test_a_worker_leaving_after_its_runs_stops_its_pool_at_once(
    fleet_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    """The pool of a worker with nothing left to do stops as soon as its processes have
    left (worker.prefork): Celery's timer thread slept 0.5 s past the join, each pool
    process 0.2-1 s past its exit message."""
    client = redis.Redis.from_url(fleet_env["EVALFLEET_BROKER_URL"])
    temporary = tmp_path / "tmp"  # the worker's TMPDIR: it leaves nothing there
    temporary.mkdir()
    with services() as fleet:
        worker = cli_worker(
            {**fleet_env, "TMPDIR": str(temporary)},
            tmp_path / "worker.log",
            "--concurrency",
            "2",
            "--loglevel",
            "DEBUG",
        )
        fleet.append(worker)
        exp_id = _submit(command_matrix(tmp_path, "touch out.txt", runs=2), fleet_env)
        wait_until(lambda: store.reports.get(exp_id), "the experiment's report", timeout=90)
        # The aggregation acknowledged too: the report is stored before it returns.
        wait_until(lambda: not _own_unacked(client), "every message acknowledged")
        worker.signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, worker.output()[-3000:]
    log = worker.output()
    stopping = _logged_at(log, "Worker: Stopping Pool...")
    stopped = _logged_at(log, "Worker: Stopping Hub...")  # the step after the pool's
    assert stopped - stopping < 0.4, log[-3000:]
    assert "exited with" not in log  # no pool process was lost on the way out
    # billiard's pool made a temporary folder for its counters; os._exit skipped the
    # handler that removes it
    assert list(temporary.iterdir()) == []


def test_one_ctrl_c_at_a_split_worker_stops_it_warm_and_its_runs_finish(
    fleet_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    """`scheduler worker --split` in a terminal: Ctrl-C reaches every node from the
    terminal, and the process that forked them did pass it on as well, which Celery
    takes for a second Ctrl-C, a cold shutdown that drops the runs under way. The
    terminal's own signal is not passed on: each node shuts down warm, and both runs
    finish there, once each."""
    env = _own_queue(fleet_env, "ctrl-c")
    command, started, finished = _slow_agent(tmp_path)
    exp_id = _submit(command_matrix(tmp_path, command, runs=2, pass_env=["WORKER_LABEL"]), env)
    argv = [executable("scheduler"), "worker", "--split", "--concurrency", "2"]
    pid, terminal = pty.fork()
    if pid == 0:  # the worker, in a session whose terminal this is
        os.execve(argv[0], argv, {**env, "WORKER_LABEL": "split"})
    output = bytearray()

    def read() -> str:
        while select.select([terminal], [], [], 0)[0]:
            try:
                output.extend(os.read(terminal, 65536))
            except OSError:  # EIO: the worker closed the terminal
                break
        return output.decode(errors="replace")

    try:
        # Reading all the while: a terminal nobody reads blocks its writers.
        wait_until(lambda: bool(read()) and len(_lines(started)) == 2, "both runs to start", 90)
        os.write(terminal, b"\x03")  # Ctrl-C: SIGINT to the terminal's foreground group
        wait_until(
            lambda: bool(read()) and os.waitpid(pid, os.WNOHANG)[0] == pid, "the worker to end", 90
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        read()
        os.close(terminal)
    said = output.decode(errors="replace")
    assert said.count("Warm shutdown") == 2 and "Cold shutdown" not in said, said[-3000:]
    assert _lines(finished) == ["split", "split"]
    runs = store.results.all(exp_id)
    assert [(r.status, r.attempts) for r in runs] == [(RunStatus.completed, 1)] * 2
