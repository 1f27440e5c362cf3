"""New report versions of a finished experiment: its runs judged again (rejudge) or
gated again on their archived workspaces (rescore), through the fleet, without
starting any agent. Version 1, the runs' own, is never overwritten.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import InputError, WorkersDied
from core.matrix import Matrix, load_matrix, load_rubric
from core.results.report import ExperimentReport
from core.wording import plural
from scheduler.connection import Connection
from scheduler.experiments import status_line

if TYPE_CHECKING:
    # Imported where a plan is made: the evaluation's modules (gates, transcripts) are
    # more than `scheduler --help` should import.
    from core.evaluation.rejudge import RejudgePlan
    from core.store import Store


@dataclass(frozen=True)
class NewVersion:
    """A report version on its way: `wait_version` gives its report."""

    experiment_id: str
    plan: RejudgePlan  # plan.version is its number

    @property
    def version(self) -> int:
        return self.plan.version


def rejudge(
    conn: Connection,
    experiment: str,
    *,
    judge_model: str | None = None,
    rubric: str | Path | None = None,
    repeats: int | None = None,
    fresh: bool = False,
) -> NewVersion:
    """Judge every run of a finished experiment again from its stored evidence, with
    another judge model, rubric (a file) or number of judgments per run if given.
    Judgments already asked come from the judgment cache at no cost; with `fresh`,
    every one is asked again and its answer replaces the cached one."""
    if judge_model is not None and not judge_model.strip():
        raise InputError(
            "--judge-model is empty: give the judge model's name, e.g. --judge-model gpt-4o"
        )
    # Read before the store is: a rubric with problems is a ConfigError, nothing started.
    new_rubric = load_rubric(Path(rubric).resolve()) if rubric is not None else None
    store = conn.store
    exp_id = finished(conn, experiment)
    matrix = store.experiments.matrix(exp_id)
    if matrix.judge is None:
        raise InputError(f"experiment {exp_id} has no judge (no top-level `judge:` in its matrix)")
    judged = [r.run_id for r in store.results.all(exp_id) if r.judge is not None]
    if not judged:
        key = f" with {matrix.judge.api_key_env} unset" if matrix.judge.api_key_env else ""
        raise InputError(
            f"no run of {exp_id} was judged, so there is nothing to judge again: its "
            f"scenarios' judge was off when it was submitted (`enabled: false`, or "
            f"`enabled: auto`{key}); submit it again with the judge on"
        )
    # Whether judge inputs were kept is seen in one run's evidence, not in every
    # run's (each is a decompression): runs judged before evidence was kept are
    # kept as they were by the workers.
    first = store.evidence.get(exp_id, judged[0])
    if first is None or first.judge is None:
        raise InputError(
            f"no run of {exp_id} has stored judge inputs (evidence): nothing to judge "
            "again; runs judged before evidence was kept cannot be rejudged"
        )
    overrides = {"model": judge_model, "repeats": repeats}
    judge = matrix.judge.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    changed = [f"{k} {v}" for k, v in overrides.items() if v is not None]
    changed += [f"rubric {rubric}"] if rubric else []
    changed += ["asked anew"] if fresh else []
    plan = {
        "judge": judge,
        "rubric": new_rubric,
        "fresh": fresh,
        "note": "rejudged" + (": " + ", ".join(changed) if changed else " (same judge)"),
    }
    runs = store.experiments.info(exp_id).completed_runs
    what = (
        f"judging {len(judged)} of {plural(runs, 'run')} again with {judge.model} x{judge.repeats}"
    )
    return _send(conn, exp_id, matrix, plan, what)


def rescore(
    conn: Connection,
    experiment: str,
    *,
    gates_from: str | Path | None = None,
) -> NewVersion:
    """Run the gates again on the runs' archived workspaces (matrix `workspace_archive:`),
    and their judge with the new gates: the experiment's own gates, or those of the
    scenarios of the matrix file `gates_from` (a gate fixed since). Runs without an
    archived workspace are kept as they were."""
    gates = {}
    if gates_from is not None:
        gates = {s.id: s.evaluation.gates for s in load_matrix(gates_from).scenarios}
    store = conn.store
    exp_id = finished(conn, experiment)
    matrix = store.experiments.matrix(exp_id)
    unknown = sorted(set(gates) - {s.id for s in matrix.scenarios})
    if unknown:
        raise InputError(
            f"{gates_from}: scenarios {', '.join(unknown)} are not in experiment {exp_id} "
            f"(its scenarios: {', '.join(s.id for s in matrix.scenarios)})"
        )
    archived = store.workspaces.count(exp_id)
    if not archived:
        raise InputError(
            f"no run of {exp_id} has an archived workspace: nothing to gate again; set "
            "`workspace_archive: {keep: failed}` in the matrix to keep them"
        )
    plan = {
        "rescore": True,
        "gates": gates,
        "note": "rescored" + (f": gates of {gates_from}" if gates_from else ""),
    }
    runs = store.experiments.info(exp_id).completed_runs
    what = f"gating {archived} of {plural(runs, 'run')} again on their archived workspaces"
    return _send(conn, exp_id, matrix, plan, what)


@dataclass(frozen=True)
class Asked:
    """What a version asked the judge: the judgments of the runs it judged again (from
    the judgment cache or not), and how many runs it kept as they were (a rescore's
    without an archived workspace, whose judgments are the original's)."""

    judgments: int
    cached: int
    kept: int
    unanswered: int = 0  # of `judgments`: a judge that did not answer (an error)


def asked(conn: Connection, version: NewVersion) -> Asked:
    store = conn.store
    runs = store.reports.runs(version.experiment_id, version.version)
    archived = store.workspaces.run_ids(version.experiment_id) if version.plan.rescore else None
    anew = [r for r in runs if archived is None or r.run_id in archived]
    judges = [r.judge for r in anew if r.judge is not None]
    return Asked(
        judgments=sum(j.repeats for j in judges),
        cached=sum(j.cached for j in judges),
        kept=len(runs) - len(anew),
        unanswered=sum(j.repeats for j in judges if j.error is not None),
    )


def finished(conn: Connection, experiment: str) -> str:
    """The id of `experiment`, which has its report (InputError if not yet)."""
    exp_id = conn.experiment_id(experiment)
    if conn.store.reports.get(exp_id) is None:
        info = conn.store.experiments.info(exp_id)
        raise InputError(f"experiment {exp_id} has not finished ({status_line(info)})")
    return exp_id


def _send(
    conn: Connection,
    exp_id: str,
    matrix: Matrix,
    plan_fields: dict[str, Any],
    what: str,
) -> NewVersion:
    """What rejudge and rescore share: a new version, sent through the fleet (embedded:
    to local workers started here)."""
    from core.evaluation.rejudge import RejudgePlan
    from scheduler.dispatch import send_rejudge  # imports Celery (see Connection.app)

    store = conn.store
    judge = plan_fields.get("judge") or matrix.judge
    key = judge.api_key_env if judge is not None else None
    # Only runs that were judged are judged again (from what their judge was shown): an
    # experiment whose judge was off (`enabled: auto` without its key) needs no key.
    if not conn.shared and key and not os.environ.get(key) and _any_judged(store, exp_id):
        # The local workers judge with this shell's environment: every judgment would
        # be an infrastructure error in a version that then shows by default.
        raise InputError(
            f"{key} is not set: the local workers need it to judge again the runs that were "
            f"judged; set it in this shell, or send this to a fleet whose workers have it "
            "(`--broker URL`); nothing was started"
        )
    plan = RejudgePlan(version=store.reports.new_version(exp_id), **plan_fields)
    app = conn.app
    conn.say(
        f"experiment {exp_id}: report version {plan.version}, {what} (the others are kept "
        "as they were)"
    )
    if not conn.shared:
        conn.start_workers([app.conf.task_default_queue])
    send_rejudge(app, store, matrix, exp_id, plan)
    return NewVersion(exp_id, plan)


def wait_version(conn: Connection, version: NewVersion) -> ExperimentReport:
    """Block until the version's report exists (a progress bar on the Fleet's console);
    its report. Raises WorkersDied when the Fleet's local workers exit first."""
    from scheduler.follow import follow_version  # imports Celery (see Connection.app)

    try:
        return follow_version(
            conn.store, version.experiment_id, version.plan, conn.console, conn.workers
        )
    except WorkersDied as exc:
        raise WorkersDied(f"{exc}; version {version.version} is incomplete") from None


def _any_judged(store: Store, exp_id: str) -> bool:
    return any(run.judge is not None for run in store.results.all(exp_id))
