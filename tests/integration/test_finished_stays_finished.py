"""A finished experiment stays finished: `cancel` of a complete one changes nothing and
says so, and a chord body whose experiment was deleted (a late or redelivered
aggregate message) is dropped in one line, not a task failure with a traceback."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from core.results.report import ID_STAMP
from core.store import Store
from fleet.sending import AGGREGATE_TASK
from tests.conftest import QUEUE, StartWorker, run_cli
from tests.support.fleet import wait_until
from worker.celery_app import create_app

MATRIX = """
name: finished
runs_per_tier: 2
agent: {kind: command, command: "true", timeout_s: 30}
tiers: [{id: T0}]
scenarios:
  - {id: s, prompt: go, evaluation: {gates: [{type: command_succeeds, command: "true"}]}}
"""


@pytest.mark.integration
def test_cancel_of_a_complete_experiment_changes_nothing_and_says_so(
    fleet_env: dict[str, str], start_worker: StartWorker, tmp_path: Path
) -> None:
    (tmp_path / "matrix.yaml").write_text(MATRIX)
    start_worker(concurrency=1)
    done = run_cli("submit", str(tmp_path / "matrix.yaml"), "--wait", "--json", env=fleet_env)
    assert done.returncode == 0, done.stderr
    exp_id = json.loads(done.stdout)["experiment"]["id"]

    cancelled = run_cli("cancel", exp_id, env=fleet_env)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"{exp_id} is already complete; nothing changed"
    [row] = [line for line in run_cli("status", exp_id, env=fleet_env).stdout.splitlines()
             if line.startswith(exp_id)]  # fmt: skip
    assert row.split()[1] == "complete"
    report = json.loads(run_cli("report", exp_id, "--format", "json", env=fleet_env).stdout)
    assert report["experiment"]["status"] == "complete"
    assert report["experiment"]["cancelled"] == 0 and report["experiment"]["passes"] == 2


@pytest.mark.integration
def test_an_aggregate_message_of_a_deleted_experiment_is_dropped_in_one_line(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store
) -> None:
    worker = start_worker(concurrency=1)
    # Stamped now, while this broker runs: stamped before it started, on a broker that
    # keeps nothing on disk, the id would read as lost in that restart (and be said so).
    gone = f"deleted-{time.strftime(ID_STAMP, time.gmtime())}-abcd"
    app = create_app(fleet_env["EVALFLEET_BROKER_URL"])
    app.send_task(AGGREGATE_TASK, args=(None, gone), queue=QUEUE, ignore_result=True)
    line = f"the report of {gone} dropped: its experiment was deleted"
    wait_until(lambda: line in worker.log.read_text(), "the dropped line")
    log = worker.log.read_text()
    assert "Traceback" not in log and "raised unexpected" not in log
    assert not store.redis.exists(store.keys.experiment(gone))
