"""The scheduler side runs without the worker's machinery: following, sending and the
Python API import the fleet's protocol (fleet), never a `worker` module, the agents'
runners among them. lint-imports holds the import graph to it; this holds what a fresh
interpreter really loads, lazy imports, Celery's shared tasks and all."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

_LOADED = (
    "import json, sys, importlib; importlib.import_module(sys.argv[1]); "
    "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'worker')))"
)


@pytest.mark.parametrize(
    "module",
    # scheduler.cli.preflight: the preflight imports the worker's run only to run one.
    ["scheduler.follow", "scheduler.dispatch", "scheduler.fleet", "evalfleet",
     "scheduler.cli.running", "scheduler.cli.preflight"],
)  # fmt: skip
def test_the_scheduler_side_loads_no_worker_module_and_no_agent(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _LOADED, module],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert not [m for m in loaded if m.startswith("worker.agents")], loaded
    assert loaded == [], f"import {module} loads the worker's {loaded}"


def test_the_probe_sees_a_worker_module_when_one_is_loaded() -> None:
    """The probe itself: the preflight runs agents as a worker does, and says so."""
    done = subprocess.run(
        [sys.executable, "-c", _LOADED, "worker.preflight"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"worker.run", "worker.agents.command", "worker.agents.openai_agent"} <= set(loaded)
