"""Agents that misbehave, through a real worker: each is bounded, recorded, and the worker lives.

One experiment, one tier per misbehaviour: an agent that hangs, one whose child
ignores SIGTERM, one that writes a gigabyte to stdout, one that fills its
workspace's disk, one that nests 3,000 folders in it, and a well-behaved one that
must still pass beside them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from core.results.run import RunStatus
from core.store import Store
from tests.conftest import StartWorker, run_cli, shared_with_agents
from tests.support.fleet import alive

pytestmark = pytest.mark.integration

AGENT = """
case $EVALFLEET_TIER in
  hang) sleep 600 ;;
  fork) (trap '' TERM; sleep 600) & echo $! > {pids}/fork.pid; sleep 600 ;;
  flood) yes 0123456789abcdef | head -c 1000000000; touch out.txt ;;
  disk) while :; do head -c 1048576 /dev/zero >> fill.bin; sleep 0.02; done ;;
  deep) python3 -c "import os
d = os.open('.', os.O_RDONLY)
for _ in range(3000):
    os.mkdir('d', dir_fd=d); inner = os.open('d', os.O_RDONLY, dir_fd=d); os.close(d); d = inner
"; sleep 1.5 ;;
  ok) touch out.txt ;;
esac
"""


def test_misbehaving_agents_are_bounded_and_recorded(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    pids = shared_with_agents(tmp_path / "pids", folder=True)
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(f"""
name: bounded
runs_per_tier: 1
agent: {{kind: command, command: {json.dumps(AGENT.format(pids=pids))}, timeout_s: 60}}
tiers:
  - {{id: hang, agent: {{timeout_s: 2}}}}
  - {{id: fork, agent: {{timeout_s: 2}}}}
  - {{id: flood, agent: {{max_transcript_bytes: 100000}}}}
  - {{id: disk, agent: {{max_workspace_mb: 5}}}}
  - {{id: deep, agent: {{max_workspace_mb: 50}}}}
  - {{id: ok}}
scenarios:
  - {{id: s, prompt: go, evaluation: {{gates: [{{type: file_exists, path: out.txt}}]}}}}
""")
    worker = start_worker(concurrency=2)
    started = time.monotonic()
    result = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env, timeout=240)
    assert result.returncode == 0, result.stderr
    exp_id = json.loads(result.stdout)["experiment"]["id"]
    runs = {r.tier: r for r in store.results.all(exp_id)}

    assert runs["hang"].status == RunStatus.timeout
    assert runs["hang"].duration_seconds < 15
    assert runs["fork"].status == RunStatus.timeout
    assert not alive(int((pids / "fork.pid").read_text()))  # the whole group was killed

    assert runs["flood"].status == RunStatus.completed and runs["flood"].passed
    assert runs["flood"].transcript_truncated  # 1 GB in, the head and tail kept

    disk = runs["disk"]
    assert disk.status == RunStatus.agent_error and not disk.passed
    assert "workspace grew past 5 MB (agent.max_workspace_mb)" in (disk.fail_reason or "")
    assert disk.duration_seconds < 15
    assert not any(Path(fleet_env["EVALFLEET_WORKDIR"]).glob(f"{exp_id}*"))  # cleaned up

    # 3,000 nested folders, walked and deleted after it: the agent's own failure (no
    # out.txt), not an infrastructure error kept out of the statistics.
    deep = runs["deep"]
    assert deep.status == RunStatus.completed and not deep.passed, deep.fail_reason

    assert runs["ok"].passed
    report = store.reports.get(exp_id)
    assert report is not None and report.experiment.completed_runs == 6
    assert report.tiers["disk"].errors == 0  # the agent's fault: a real, failed result
    assert worker.proc.poll() is None
    assert time.monotonic() - started < 120
