"""Retention through the CLI: `scheduler prune` by age, `scheduler delete` of a running
experiment, `scheduler list` sizes. The experiments live under a key prefix of this
test's own, so pruning by age cannot touch another test's experiments.

(That `delete` removes every key of an experiment that really ran, its files,
attempts and Celery chord keys included: tests.integration.test_bundles.) A running
experiment deleted with --force: its queued runs are dropped by the workers,
which write nothing back.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import redis

from core.evidence.models import RunEvidence
from core.files.bundle import Bundle, Manifest
from core.results.report import ExperimentStatus
from core.results.run import RunSpec
from core.store import Store
from tests.conftest import PREFIX, QUEUE, SCHEDULER, _own_unacked, shared_with_agents
from tests.support.experiments import Cell, command_matrix, seed_experiment
from tests.support.fleet import cli_worker, services, wait_until
from tests.support.terminal import table_row

pytestmark = pytest.mark.integration
DAY = 86400.0


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # No terminal, as in a CI job: questions cannot be answered.
    return subprocess.run(
        [SCHEDULER, *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_prune_removes_only_old_experiments_and_delete_spares_running_ones(
    fleet_env: dict[str, str], redis_url: str, tmp_path: Path
) -> None:
    prefix = f"{PREFIX}retention-{uuid.uuid4().hex[:6]}:"
    env = {**fleet_env, "EVALFLEET_KEY_PREFIX": prefix}
    store = Store.from_url(redis_url, prefix=prefix)
    cells = {("T0", "s1"): Cell((True, False))}
    now = time.time()
    old = seed_experiment(store, tmp_path / "a", cells, "old", created_at=now - 60 * DAY)
    running = seed_experiment(store, tmp_path / "b", cells, "running", created_at=now - 40 * DAY)
    recent = seed_experiment(store, tmp_path / "c", cells, "recent", created_at=now - 1 * DAY)
    store.experiments.set_status(running, ExperimentStatus.running)
    store.bundles.save(old, Bundle(Manifest(), {"d" * 64: b"shipped file"}))
    # Evidence in Redis for one run, as a file in an artifacts folder for another.
    store.evidence.save(RunEvidence(experiment_id=old, run_id=f"{old}:T0:s1:0"))
    artifacts = tmp_path / "artifacts"
    on_disk = store.evidence.save(
        RunEvidence(experiment_id=old, run_id=f"{old}:T0:s1:1"), folder=artifacts
    ).path
    assert on_disk is not None and on_disk.is_file()

    def keys_of(exp_id: str) -> list[str]:
        return sorted(store.redis.scan_iter(match=f"{prefix}*{exp_id}*"))

    before = {exp_id: keys_of(exp_id) for exp_id in (old, running, recent)}
    assert {store.keys.files(old), store.keys.evidence(old)} <= set(before[old])

    listed = _cli("list", env=env)
    assert listed.returncode == 0, listed.stderr
    for exp_id in before:
        assert re.fullmatch(r"[\d.]+ [KM]?B", table_row(listed.stdout, exp_id)[-1])
    sizes = {e["id"]: e["stored_bytes"] for e in json.loads(_cli("list", "--json", env=env).stdout)}
    assert all(size > 1000 for size in sizes.values()), sizes

    dry = _cli("prune", "--older-than", "30d", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert f"would delete {old}" in dry.stdout and recent not in dry.stdout
    assert f"keeping {running}" in " ".join(dry.stderr.split())
    unasked = _cli("prune", "--older-than", "30d", env=env)
    assert unasked.returncode == 2 and "--yes" in unasked.stderr
    assert {exp_id: keys_of(exp_id) for exp_id in before} == before  # nothing deleted yet
    assert on_disk.is_file()

    pruned = _cli("prune", "--older-than", "30d", "--yes", env=env)
    assert pruned.returncode == 0, pruned.stderr
    assert keys_of(old) == [] and old not in store.redis.zrange(store.keys.experiments(), 0, -1)
    assert f"deleted {old}" in pruned.stdout
    assert re.search(r", 1 evidence file$", pruned.stdout, re.M), pruned.stdout
    # One experiment, said so ("1 experiments" before).
    assert re.search(
        r"^1 experiment, [\d.]+ [KM]?B \(dry run: nothing deleted\)$", dry.stdout, re.M
    )
    assert re.search(r"^deleted 1 experiment, [\d.]+ [KM]?B$", pruned.stdout, re.M), pruned.stdout
    assert not on_disk.exists() and not (artifacts / old).exists()
    assert keys_of(running) == before[running] and keys_of(recent) == before[recent]

    refused = _cli("delete", running, "--yes", env=env)
    assert refused.returncode == 2
    assert "is running" in refused.stderr and "--force" in refused.stderr
    assert keys_of(running) == before[running]
    forced = _cli("delete", running, "--yes", "--force", env=env)
    assert forced.returncode == 0, forced.stderr
    assert keys_of(running) == [] and keys_of(recent) == before[recent]

    bad_age = _cli("prune", "--older-than", "a month", env=env)
    assert bad_age.returncode == 2 and "not an age" in bad_age.stderr
    assert _cli("delete", recent, "--yes", env=env).returncode == 0
    assert list(store.redis.scan_iter(match=f"{prefix}*")) == []


def test_a_running_experiment_deleted_with_force_leaves_no_key_once_workers_drop_its_runs(
    fleet_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    # Its runs wait in a queue no worker takes from until it is deleted.
    queue = f"{QUEUE}-deleted"
    matrix = command_matrix(tmp_path, "touch out.txt", runs=3, extra=f"queue: {queue}")
    submitted = _cli("submit", str(matrix), env=fleet_env)
    assert submitted.returncode == 0, submitted.stderr
    exp_id = submitted.stdout.strip()
    record = store.redis.hgetall(store.keys.experiment(exp_id))
    chords = record["chords"].split()

    deleted = _cli("delete", exp_id, "--yes", "--force", env=fleet_env)
    assert deleted.returncode == 0, deleted.stderr
    with services() as started:
        worker = cli_worker(fleet_env, tmp_path / "worker.log", "--queues", queue)
        started.append(worker)
        wait_until(
            lambda: worker.output().count("dropped: its experiment was deleted") == 3,
            "the worker dropping the deleted experiment's three runs",
        )
        wait_until(lambda: store.redis.llen(queue) == 0, "an empty queue")
        # As in the mid-run test below: a message taken from the queue is acknowledged
        # just after its line is logged; stopped before that, its pool process dies with
        # it (a logged WorkerLostError; a clean-clone CI run under load met it here).
        broker = redis.Redis.from_url(fleet_env["EVALFLEET_BROKER_URL"])
        wait_until(lambda: not _own_unacked(broker, queue), "every message acknowledged")

    assert list(store.redis.scan_iter(match=f"{PREFIX}*{exp_id}*")) == []
    assert not any(store.redis.exists(key) for g in chords for key in store.keys.chord(g))
    assert "Traceback" not in worker.output()


def test_runs_of_an_experiment_deleted_mid_run_stop_at_once_and_bring_no_key_back(
    fleet_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    """The worker has run the experiment, so its process knows the matrix: the delete
    is checked at each delivery's start, and the run in flight stores nothing."""
    queue = f"{QUEUE}-deleted-mid-run"
    started = shared_with_agents(tmp_path / "started.log")
    command = f'echo "$EVALFLEET_RUN_ID" >> {started}; sleep 1; touch out.txt'
    matrix = command_matrix(tmp_path, command, runs=12, extra=f"queue: {queue}")
    with services() as running:
        worker = cli_worker(fleet_env, tmp_path / "worker.log", "--queues", queue)
        running.append(worker)
        submitted = _cli("submit", str(matrix), env=fleet_env)
        assert submitted.returncode == 0, submitted.stderr
        exp_id = submitted.stdout.strip()
        # Two finished (the matrix is in the worker's cache), the third in flight.
        wait_until(lambda: len(_lines(started)) >= 3, "three runs to start", timeout=60)
        deleted = _cli("delete", exp_id, "--yes", "--force", env=fleet_env)
        assert deleted.returncode == 0, deleted.stderr
        at_delete = len(_lines(started))
        wait_until(lambda: store.redis.llen(queue) == 0, "the queue drained", timeout=60)
        wait_until(
            lambda: worker.output().count("dropped: its experiment was deleted") >= 12 - at_delete,
            "the worker dropping every run not yet started",
        )
        # A dropped run's message is acknowledged just after its line is logged:
        # stopped before that, its pool process dies with it (a logged WorkerLostError).
        broker = redis.Redis.from_url(fleet_env["EVALFLEET_BROKER_URL"])
        wait_until(lambda: not _own_unacked(broker, queue), "every message acknowledged")
    # At most the run that was starting as the delete landed began after it.
    assert len(_lines(started)) <= at_delete + 1, _lines(started)
    assert list(store.redis.scan_iter(match=f"{PREFIX}*{exp_id}*")) == []
    gone = _cli("status", exp_id, env=fleet_env)
    assert gone.returncode == 2 and f"no experiment '{exp_id}'" in gone.stderr
    assert "Traceback" not in worker.output() + gone.stderr


def test_an_experiment_the_broker_half_lost_is_named_by_every_command(
    fleet_env: dict[str, str], redis_url: str, tmp_path: Path
) -> None:
    """A Redis restarted without persistence, or one that evicts: some keys are left
    without the experiment's record. Each command says so in one sentence."""
    prefix = f"{PREFIX}lost-{uuid.uuid4().hex[:6]}:"
    env = {**fleet_env, "EVALFLEET_KEY_PREFIX": prefix}
    store = Store.from_url(redis_url, prefix=prefix)
    exp_id = seed_experiment(store, tmp_path, {("T0", "s1"): Cell((True, False))}, "lost")
    store.redis.hdel(store.keys.experiment(exp_id), "info", "matrix")
    try:
        for command in (["status", exp_id], ["report", exp_id], ["show", exp_id, "T0", "s1", "0"]):
            answered = _cli(*command, env=env)
            assert answered.returncode == 2, (command, answered.stderr)
            assert "only partly in this store" in answered.stderr, (command, answered.stderr)
            assert f"scheduler delete {exp_id} --force" in answered.stderr
            assert "Traceback" not in answered.stderr
        assert _cli("delete", exp_id, "--yes", "--force", env=env).returncode == 0
        assert list(store.redis.scan_iter(match=f"{prefix}*")) == []
    finally:
        for key in store.redis.scan_iter(match=f"{prefix}*"):
            store.redis.delete(key)


def test_runs_whose_evidence_was_not_stored_are_named_not_read_as_killed(
    fleet_env: dict[str, str], redis_url: str, tmp_path: Path
) -> None:
    """A worker stores a run's result, then its evidence; a full broker (or a worker
    stopped in between) keeps the second from landing. The report says how many, and
    `show` says so of the run, whose delivery ended with its result, not as killed."""
    prefix = f"{PREFIX}noevidence-{uuid.uuid4().hex[:6]}:"
    env = {**fleet_env, "EVALFLEET_KEY_PREFIX": prefix}
    store = Store.from_url(redis_url, prefix=prefix)
    exp_id = seed_experiment(store, tmp_path, {("T0", "s1"): Cell((True, False, True))})
    run_id = f"{exp_id}:T0:s1:1"
    spec = RunSpec(experiment_id=exp_id, run_id=run_id, tier="T0", scenario="s1", run_index=1)
    store.attempts.begin(spec, "d1", 60, worker="w1")  # its delivery
    try:
        assert store.reports.get(exp_id).evidence_missing == 0  # type: ignore[union-attr]
        store.redis.hdel(store.keys.evidence(exp_id), run_id)
        from fleet.finish import finish_experiment  # as the sweep aggregates again

        finish_experiment(store, exp_id)
        report = _cli("report", exp_id, "--format", "markdown", env=env)
        assert report.returncode == 0, report.stderr
        said = " ".join(report.stdout.split())
        assert "evidence of 1 run was not stored" in said and "their results stand" in said
        shown = _cli("show", run_id, env=env)
        assert shown.returncode == 0, shown.stderr
        out = " ".join((shown.stdout + shown.stderr).split())
        assert "evidence was not stored" in out and "its result stands" in out
        assert "worker was killed" not in out and "failed" in out  # the run's own outcome
    finally:
        for key in store.redis.scan_iter(match=f"{prefix}*"):
            store.redis.delete(key)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []
