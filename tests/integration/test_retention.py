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

from core.evidence.models import RunEvidence
from core.files.bundle import Bundle, Manifest
from core.results.report import ExperimentStatus
from core.store import Store
from tests.conftest import PREFIX, QUEUE, SCHEDULER
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
    assert f"deleted {old}" in pruned.stdout and "1 evidence files" in pruned.stdout
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

    assert list(store.redis.scan_iter(match=f"{PREFIX}*{exp_id}*")) == []
    assert not any(store.redis.exists(key) for g in chords for key in store.keys.chord(g))
    assert "Traceback" not in worker.output()
