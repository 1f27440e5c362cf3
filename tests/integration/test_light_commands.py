"""The commands that only read and print (`status`, `report` of a finished experiment)
import neither Celery, redis-py's asyncio client nor the matrix's models: each in a
fresh process, as a user starts it, the modules it loaded listed at its end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.store import Store
from tests.conftest import PREFIX, ROOT
from tests.support.experiments import Cell, seed_experiment

pytestmark = pytest.mark.integration

# pydantic.json_schema is not among them: pydantic's BaseModel imports it, and reading a
# stored report is reading pydantic models.
HEAVY = ("celery", "kombu", "redis.asyncio.client", "core.matrix")

# The CLI as the console script runs it, then what it loaded (os._exit in the console
# script would end the process first: here, click's own main, not standalone).
_PROBE = """
import json, sys
from scheduler.cli import main
try:
    main.main(sys.argv[1:], standalone_mode=False)
finally:
    print(json.dumps(sorted(m for m in HEAVY if m in sys.modules)), file=sys.stderr)
"""


@pytest.fixture(scope="module")
def finished(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    cells = {("T0", "s1"): Cell((True, False, True)), ("T1", "s1"): Cell((True, True, True))}
    store = Store.from_url(redis_url, prefix=PREFIX)
    return seed_experiment(store, tmp_path_factory.mktemp("light"), cells, name="light")


def _probe(env: dict[str, str], *args: str) -> tuple[str, list[str]]:
    """What the command printed, and which of HEAVY it imported."""
    done = subprocess.run(
        [sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{_PROBE}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads(done.stderr.strip().splitlines()[-1])


def test_status_of_a_finished_experiment_imports_none_of_the_heavy_modules(
    finished: str, fleet_env: dict[str, str]
) -> None:
    shown, loaded = _probe(fleet_env, "status", finished)
    assert finished in shown and "complete" in shown and "5/6" not in shown
    assert loaded == []


def test_report_of_a_finished_experiment_imports_none_of_the_heavy_modules(
    finished: str, fleet_env: dict[str, str], tmp_path: Path
) -> None:
    table, loaded = _probe(fleet_env, "report", finished)
    assert "T1" in table and "T0" in table
    assert loaded == []
    as_json, loaded = _probe(fleet_env, "report", finished, "--format", "json")
    assert json.loads(as_json)["experiment"]["id"] == finished
    assert loaded == []
