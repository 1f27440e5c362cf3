"""The Python API (evalfleet), as a notebook uses it: a Fleet submits the example
experiment, waits for it and reads it back as the pydantic models, on the session's
Redis with real worker processes; and in embedded mode, where the Fleet starts and
stops its own."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

import pytest

import evalfleet
from core.results.report import ExperimentStatus
from core.results.run import RunStatus
from tests.conftest import EXAMPLES, QUEUE, StartWorker

pytestmark = pytest.mark.integration


def test_the_api_runs_the_example_and_reads_its_report_and_runs(
    redis_url: str, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # the example judges only with one
    start_worker(concurrency=2)
    with evalfleet.Fleet.connect(redis_url, queue=QUEUE) as fleet:
        assert fleet.shared
        sent = fleet.submit(EXAMPLES / "matrix.yaml")
        assert sent.runs == 30 and sent.local_workers is None  # the fleet's workers take them
        exp_id = sent.experiment_id
        report = fleet.wait(sent)

        assert isinstance(report, evalfleet.ExperimentReport)
        assert report.experiment.id == exp_id
        assert report.experiment.status == ExperimentStatus.complete
        assert report.experiment.completed_runs == 30 and report.experiment.errors == 0
        # The stand-in agent's skill: T2's stronger model passes more often than no guidance.
        t0, t2 = report.tiers["T0"].pass_rate.mean, report.tiers["T2"].pass_rate.mean
        assert t0 is not None and t2 is not None and t2 > t0

        runs = list(fleet.runs(sent))
        assert sorted((r.tier, r.scenario, r.run_index) for r in runs) == sorted(
            (t, s, i)
            for t in ("T0", "T1", "T2")
            for s in ("create_notes", "link_notes")
            for i in range(5)
        )
        for run in runs:
            assert run.status == RunStatus.completed, run.fail_reason
            assert run.judge is None  # no OPENAI_API_KEY: `enabled: auto` is off
            # No judge: a run passes exactly when every gate of its scenario did.
            assert run.passed == all(g.passed for g in run.gates), run.run_id
            assert run.gates_total == len(run.gates) == (5 if run.scenario == "create_notes" else 3)
        passes = collections.Counter(r.tier for r in runs if r.passed)
        assert {t: tier.passes for t, tier in report.tiers.items()} == {
            t: passes[t] for t in ("T0", "T1", "T2")
        }

        with_runs = fleet.report(sent, runs=True)
        assert with_runs.runs is not None
        assert {r.run_id: r.passed for r in with_runs.runs} == {r.run_id: r.passed for r in runs}
        assert fleet.report().experiment.id == exp_id  # the latest
        assert fleet.report_versions(exp_id) == [1]

        one = next(r for r in runs if r.scenario == "create_notes")
        loaded = fleet.run(one.run_id)
        assert fleet.run(exp_id, one.tier, one.scenario, str(one.run_index)) == loaded
        assert loaded.record.result == one
        assert loaded.record.evidence is not None
        gates = loaded.record.evidence.gates
        assert len(gates) == len(one.gates) and gates[0].command == "my-tool list --format json"

        listed = {e.info.id: e for e in fleet.experiments()}
        assert listed[exp_id].info.passes == sum(passes.values())
        assert listed[exp_id].stored_bytes > 0
        assert fleet.status(sent).info.status == ExperimentStatus.complete

        with pytest.raises(evalfleet.ExperimentNotFound) as missing:
            fleet.report(f"{exp_id}-none")
        assert isinstance(missing.value, evalfleet.InputError)
        assert fleet.delete(sent).keys > 0
        assert exp_id not in {e.info.id for e in fleet.experiments()}


def test_an_embedded_fleet_runs_its_own_redis_and_workers_and_stops_them(
    fleet_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EVALFLEET_BROKER_URL", raising=False)
    monkeypatch.setenv("EVALFLEET_WORKDIR", fleet_env["EVALFLEET_WORKDIR"])
    (tmp_path / "matrix.yaml").write_text(
        """
name: api-embedded
runs_per_tier: 2
agent: {command: "echo done > out.txt", timeout_s: 30}
tiers: [{id: T0}]
scenarios:
  - id: s
    prompt: p
    evaluation: {gates: [{type: file_contains, path: out.txt, substring: done}]}
"""
    )
    with pytest.raises(evalfleet.InputError, match="no embedded store in this folder"):
        evalfleet.Fleet.embedded(create=False).experiments()  # where none was ever started
    with pytest.raises(evalfleet.InputError, match=r"no broker: pass Fleet\.connect a URL"):
        evalfleet.Fleet.connect()  # no URL, and none in the environment

    with evalfleet.Fleet.embedded(workers=1) as fleet:
        assert not fleet.shared
        sent = fleet.submit("matrix.yaml")
        assert sent.local_workers == 1
        report = fleet.wait(sent)
        workers = _local_workers()
        assert len(workers) == 1, workers
    assert not _local_workers()  # closing the Fleet stopped what it started
    assert not (tmp_path / ".evalfleet" / "redis.json").exists()

    assert report.experiment.passes == 2
    assert report.runs is None  # the report alone: runs() gives them
    with evalfleet.Fleet.embedded(create=False) as fleet:  # the store reopens, its data kept
        runs = list(fleet.runs(sent))
        outcomes = sorted((r.run_index, r.passed, r.gates[0].passed) for r in runs)
        assert outcomes == [(0, True, True), (1, True, True)]
        assert fleet.report().experiment.id == sent.experiment_id  # the latest


def test_the_readmes_example_runs_as_written_and_counts_as_the_report_does(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    """The README's Python example, run as written from a folder with an
    examples/matrix.yaml: a tier's line is passes over runs counted, as the README
    defines a pass rate (it printed passes over runs, infrastructure errors included)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    example = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert 'fleet.submit("examples/matrix.yaml")' in example
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "matrix.yaml").write_text(
        """
name: readme-api
runs_per_tier: 3
agent: {command: "echo done > out.txt", timeout_s: 30}
tiers: [{id: T0}]
scenarios:
  - id: s
    prompt: p
    setup: ['[ "$EVALFLEET_RUN_INDEX" != 0 ]']
    evaluation: {gates: [{type: file_contains, path: out.txt, substring: done}]}
"""
    )
    env = {k: v for k, v in os.environ.items() if k != "EVALFLEET_BROKER_URL"}
    env["EVALFLEET_WORKDIR"] = fleet_env["EVALFLEET_WORKDIR"]
    ran = subprocess.run(
        [sys.executable, "-c", example], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["T0 2/2 passed"]  # run 0's setup failed: not counted


def _local_workers() -> list[int]:
    """This process's children that are worker processes (`python -m worker`), alive."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):  # not a process, or gone meanwhile
            continue
        fields = stat.rsplit(")", 1)[1].split()
        alive = fields[0] != "Z"
        if alive and int(fields[1]) == os.getpid() and command[1:4] == [b"-P", b"-m", b"worker"]:
            found.append(int(entry.name))
    return found
