"""The Inspect AI side of bench/peers.py: an eval doing the work of evalfleet's no-op
runs, three subprocesses through bash a sample: the agent (`true`) and two gates.

    inspect eval bench/inspect_noop.py --model mockllm/model [-T samples=1000]

No model is asked anything: the solver runs the agent command, the scorer the gates.
"""

from __future__ import annotations

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import Score, Scorer, Target, accuracy, scorer
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.util import subprocess

AGENT = "true"
GATES = ("true", "true")


@solver
def command_agent() -> Solver:
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        await subprocess(["bash", "-c", AGENT])
        return state

    return solve


@scorer(metrics=[accuracy()])
def shell_gates() -> Scorer:
    async def score(state: TaskState, target: Target) -> Score:
        passed = [(await subprocess(["bash", "-c", gate])).success for gate in GATES]
        return Score(value=1 if all(passed) else 0)

    return score


@task
def noop(samples: int = 1) -> Task:
    """`samples` samples (`-T samples=1000`), each the three subprocesses."""
    dataset = [Sample(input="go", id=i) for i in range(samples)]
    return Task(dataset=dataset, solver=command_agent(), scorer=shell_gates())
