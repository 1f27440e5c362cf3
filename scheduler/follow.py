"""Following an experiment until its report exists, with a progress bar on stderr.

The follower wakes on each status change the store announces (Store.set_status),
so the end of an experiment is seen at once, and every _POLL_S otherwise for the
progress bar. The follower also sweeps the experiment every second (fleet.recovery):
runs whose worker died are sent again, and the experiment is aggregated once
every run has a result, even when its chord never fires. A broker that goes
away for a while (a Redis restart) is waited for, not fatal.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any, Protocol

import redis
from celery import Celery
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from core.errors import WorkersDied
from core.evaluation.rejudge import RejudgePlan
from core.evidence.text import visible
from core.results.report import ExperimentReport, ExperimentStatus
from core.store import Store
from fleet.app import BROKER_DOWN
from fleet.finish import finish_version
from fleet.recovery import recover
from fleet.sending import no_worker_takes, queues_without_workers
from scheduler.interrupt import raise_if_lost

_POLL_S = 0.25
_SWEEP_S = 1.0
# A shared experiment with no result this long: are its queues served at all?
_SERVED_AFTER_S = 5.0
_DONE = (ExperimentStatus.complete, ExperimentStatus.cancelled)


class Workers(Protocol):
    @property
    def log_path(self) -> object: ...

    def alive(self) -> bool: ...

    def broker_gone(self) -> str | None: ...


def follow(
    app: Celery,
    store: Store,
    exp_id: str,
    console: Console,
    workers: Workers | None = None,
    hinted: Callable[[str], str] = str,
) -> None:
    """Block until the experiment is complete (or cancelled and aggregated), sweeping it
    for lost runs on the way (fleet.recovery). `hinted` completes the commands its notes
    suggest."""
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("passed {task.fields[passes]}  infra errors {task.fields[errors]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
    announced: set[str] = set()
    warned: set[str] = set()
    said: set[str] = set()
    with progress, contextlib.closing(_StatusWait(store, exp_id)) as waits:
        # Its total once the first read answers: the broker may be away from the start
        # (a follower that got here late, into an outage).
        task = progress.add_task("runs", total=None, passes=0, errors=0)
        swept = started = time.monotonic()
        unreachable = False
        asked = workers is not None  # local workers serve their queues
        while True:
            if workers is not None and not workers.alive():
                raise WorkersDied(f"the local workers exited; see {workers.log_path}")
            try:
                waits.subscribe()  # before reading: no change falls between the two
                info = store.experiments.info(exp_id)
                # An adaptive experiment's total drops as its cells stop (fleet.waves).
                progress.update(
                    task,
                    total=info.total_runs,
                    completed=info.completed_runs,
                    passes=info.passes,
                    errors=info.errors,
                )
                _announce_halts(store, exp_id, console, announced)
                _announce_budget(store, exp_id, console, said)
                _announce_unrecognised(store, exp_id, console, warned)
                if info.status in _DONE and store.reports.get(exp_id) is not None:
                    return
                if not asked and time.monotonic() - started >= _SERVED_AFTER_S:
                    asked = True
                    if not info.completed_runs:
                        _announce_unserved(app, store, exp_id, console, hinted)
                if time.monotonic() - swept >= _SWEEP_S:
                    recover(app, store, exp_id)
                    swept = time.monotonic()
                unreachable = False
            except BROKER_DOWN as exc:
                # A shared broker comes back (a restart, a failover); an embedded one that
                # another command stopped does not.
                gone = workers.broker_gone() if workers is not None else None
                if gone is not None:
                    raise WorkersDied(gone) from None
                if not unreachable:
                    why = escape(broker_unavailable(exc))
                    console.print(f"[yellow]{why}; waiting for it[/yellow]", soft_wrap=True)
                unreachable = True
            waits.wait()


def _announce_unserved(
    app: Celery, store: Store, exp_id: str, console: Console, hinted: Callable[[str], str]
) -> None:
    """Once, on a shared broker: the queues no worker takes, where the runs would wait
    for ever without a word (workers not started, or started on another queue). Only a
    note: asking that fails (a broker that refuses it) is no reason to stop following."""
    try:
        idle = queues_without_workers(app, store.experiments.matrix(exp_id), store, exp_id)
    except Exception:  # a broker's refusal or Celery's: the note is left out
        return
    if idle:
        # Unwrapped: its command is copied whole (a line rich broke at 80 columns off a
        # terminal would not run).
        console.print(f"[yellow]{escape(hinted(no_worker_takes(idle)))}[/yellow]", soft_wrap=True)


def broker_unavailable(exc: BaseException) -> str:
    """What a broker error (BROKER_DOWN) says of the broker, for a person."""
    if isinstance(exc, redis.OutOfMemoryError):
        return (
            f"the broker is full and refuses writes ({exc}): free memory on it or raise "
            "its maxmemory"
        )
    return f"broker unreachable ({exc})"


class _StatusWait:
    """Waits for the experiment's next status change (Store.status_changes), at most
    _POLL_S; a plain sleep while the broker is away."""

    def __init__(self, store: Store, exp_id: str):
        self.store, self.exp_id = store, exp_id
        self.changes: Any = None

    def subscribe(self) -> None:
        if self.changes is None:
            self.changes = self.store.experiments.status_changes(self.exp_id)

    def wait(self) -> None:
        raise_if_lost()
        if self.changes is not None:
            try:
                self.changes.get_message(timeout=_POLL_S)
                return
            except BROKER_DOWN:
                self.close()
        time.sleep(_POLL_S)

    def close(self) -> None:
        if self.changes is not None:
            with contextlib.suppress(*BROKER_DOWN):
                self.changes.close()
            self.changes = None


def _announce_unrecognised(
    store: Store, exp_id: str, console: Console, announced: set[str]
) -> None:
    """Say once per tier that its agent's output is not in the format the matrix names:
    every such run is an agent error, and the likely cause is the matrix, not the agent."""
    for tier, fmt in store.health.unrecognised(exp_id).items():
        if tier in announced:
            continue
        console.print(
            f"[yellow]tier {tier}: the agent's output is not {escape(fmt)}[/yellow]; its runs "
            "are agent errors until `agent.transcript` names the format the agent writes "
            "(or `transcript: auto`)",
            highlight=False,
            soft_wrap=True,
        )
        announced.add(tier)


def _announce_budget(store: Store, exp_id: str, console: Console, said: set[str]) -> None:
    """Say once that the budget stopped runs from starting, and why."""
    if "budget" in said:
        return
    stopped = store.ledger.state(exp_id).stopped
    if stopped is not None:
        console.print(
            f"[yellow]budget reached:[/yellow] no further run starts; runs in flight finish "
            f"({escape(stopped)})",
            highlight=False,
            soft_wrap=True,
        )
        said.add("budget")


def _announce_halts(store: Store, exp_id: str, console: Console, announced: set[str]) -> None:
    """Say at once, and once, that fail-fast stopped a tier: its set-up is broken."""
    halted = {t: r for t, r in store.health.halted(exp_id).items() if t not in announced}
    if not halted:
        return
    matrix = store.experiments.matrix(exp_id)
    for tier, reason in halted.items():
        agent = matrix.agent_for(matrix.tier(tier))
        command = agent.command if agent.kind == "command" else f"openai loop @ {agent.base_url}"
        others = sum(map(matrix.runs_for, matrix.scenarios)) > matrix.fail_fast
        console.print(
            f"[red]tier {tier} stopped:[/red] "
            + (
                "its first run ended with an infrastructure error"
                if matrix.fail_fast == 1
                else f"its first {matrix.fail_fast} runs all ended with the same infrastructure "
                "error"
            )
            + (", so its other runs are not run" if others else "")
            + ".\n"
            f"  error: {escape(visible(reason))}\n  agent: {escape(command or '')}",
            highlight=False,
            markup=True,
            soft_wrap=True,
        )
        announced.add(tier)


def follow_version(
    store: Store,
    exp_id: str,
    plan: RejudgePlan,
    console: Console,
    workers: Workers | None = None,
) -> ExperimentReport:
    """Block until the version's report exists; aggregates it here when every run has
    its result but the chord's body did not come (a worker lost on the way)."""
    total = store.experiments.info(exp_id).completed_runs
    progress = Progress(
        TextColumn(f"[bold]{'rescore' if plan.rescore else 'rejudge'} v{plan.version}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )
    with progress:
        task = progress.add_task("runs", total=total)
        while True:
            if workers is not None and not workers.alive():
                raise WorkersDied(f"the local workers exited; see {workers.log_path}")
            report = store.reports.get(exp_id, plan.version)
            if report is not None:
                progress.update(task, completed=total)
                return report
            done = store.reports.run_count(exp_id, plan.version)
            progress.update(task, completed=done)
            if done >= total:
                finish_version(store, exp_id, plan)
            raise_if_lost()
            time.sleep(_POLL_S)
