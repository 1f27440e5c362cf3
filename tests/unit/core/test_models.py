"""core.models.complete: the models pydantic deferred are built ahead of their use, by
the warm process and by a worker before its pool forks."""

from __future__ import annotations

import subprocess
import sys

# In a new interpreter: the test process may have built them already, by using them.
_OURS = """
from pydantic import BaseModel

def deferred():
    pending, names = list(BaseModel.__subclasses__()), []
    while pending:
        model = pending.pop()
        pending.extend(model.__subclasses__())
        ours = model.__module__.startswith(("core.", "scheduler.", "worker.", "fleet."))
        if ours and not model.__pydantic_complete__:
            names.append(model.__name__)
    return names
"""

_COMMANDS = """
import importlib
import scheduler.warm_server
from core.models import complete

for name in scheduler.warm_server.RUNNING_COMMANDS:
    importlib.import_module(name)
before = deferred()
built = complete()
print(len(before), built, len(deferred()))
"""

_WORKER = """
import importlib
importlib.import_module("worker.__main__").preimport()
import worker.run, core.results.report  # a run's models and the report's
print(deferred())
"""


def _run(script: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _OURS + script],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return done.stdout.strip()


def test_every_deferred_model_of_evalfleets_is_built_and_none_is_left() -> None:
    deferred, built, left = map(int, _run(_COMMANDS).split())
    assert deferred > 0  # what there is to build: else this test shows nothing
    assert built >= deferred and left == 0


def test_a_worker_builds_them_before_its_pool_forks() -> None:
    # Each pool process would otherwise build those of a run at its first: ~50 ms.
    assert _run(_WORKER) == "[]"
