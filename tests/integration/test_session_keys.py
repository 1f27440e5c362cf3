"""The test suite cleans up after itself: a session deletes every key it wrote.

A small session (a run task whose Celery result is stored, a chord left
unfinished and resumed, two workers answering a ping) runs as a subprocess
against a private Redis, split over two pytest-xdist workers as the README's
command splits the suite (each worker deletes its own keys at its end);
afterwards that Redis must be empty.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from scheduler.embedded import redis_server_binary
from tests.conftest import ROOT
from tests.support.fleet import Service, free_port, services

pytestmark = pytest.mark.integration

INNER = [
    "tests/integration/test_distributed.py::test_a_redelivered_run_returns_its_stored_result",
    "tests/integration/test_distributed.py::test_resume_finishes_a_half_done_experiment_without_rerunning_finished_runs",
    "tests/integration/test_fleet_workers.py::test_two_workers_on_one_machine_get_distinct_node_names_by_default",
]


def test_a_test_session_leaves_no_key_behind(tmp_path: Path) -> None:
    port = free_port()
    with services() as fleet:
        server = Service(
            [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", ""],
            dict(os.environ),
            tmp_path / "redis.log",
            cwd=tmp_path,
        )
        fleet.append(server)
        server.wait_for("Ready to accept connections")
        url = f"redis://127.0.0.1:{port}/13"
        # A session of its own: not this one's name, prefix or queue, nor its xdist worker id.
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("EVALFLEET_", "PYTEST_XDIST_"))
        }
        inner = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", *INNER],
            env={**env, "EVALFLEET_TEST_REDIS_URL": url},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert inner.returncode == 0, inner.stdout[-3000:] + inner.stderr[-2000:]
        assert "3 passed" in inner.stdout
        left = sorted(redis.Redis.from_url(url, decode_responses=True).keys("*"))
        assert left == [], left
