"""Reading experiments back: the list, one's progress, its report (any version), its
runs, one run with its evidence, and two compared.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from pydantic import ValidationError

from core.errors import FleetError, InputError
from core.evidence.models import RunRecord
from core.results.report import (
    ExperimentComparison,
    ExperimentInfo,
    ExperimentReport,
    ExperimentStatus,
)
from core.results.run import RunResult, outcome
from core.stats.choices import DEFAULT_ALPHA, DEFAULT_CORRECTION, Correction
from core.store.retention import stored_bytes
from core.wording import plural

# Imported where used: a status, or a stored report as it was made, needs neither the
# analysis (and through it the matrix's models) nor Celery.
if TYPE_CHECKING:
    from core.store import Store
    from scheduler.connection import Connection


@dataclass(frozen=True)
class Listed:
    info: ExperimentInfo
    report_versions: list[int]
    stored_bytes: int  # MEMORY USAGE of its keys, summed


def list_experiments(conn: Connection) -> list[Listed]:
    """Every experiment, oldest first, with its report versions and what it takes in Redis."""
    store = conn.store
    infos = store.experiments.all()
    sizes = stored_bytes(store)
    return [Listed(i, store.reports.versions(i.id), sizes.get(i.id, 0)) for i in infos]


@dataclass(frozen=True)
class Status:
    info: ExperimentInfo
    idle_queues: list[str]  # shared broker, runs to take: its queues no live worker takes
    # Why the workers could not be asked which queues they take (the broker full or away).
    unasked: str | None = None
    unrenewed: Unrenewed | None = None  # runs in progress whose leases stopped being renewed


@dataclass(frozen=True)
class Unrenewed:
    """Runs whose lease, renewed every third of `lease_s` while their worker lives, was
    last renewed more than half of it ago (a worker killed or frozen), and those whose
    lease lapsed without a result, not yet sent again by a sweep."""

    runs: int
    ago_s: float  # the longest since a renewal
    lapse_in_s: float  # when the last of their leases lapses, and the runs are sent again
    lapsed: int = 0  # runs whose lease lapsed without a result, not yet sent again


def status(conn: Connection, experiment: str | None = None) -> Status:
    """Progress of an experiment (default: the latest), and on a shared broker the
    queues it waits on that no worker consumes (a cancelled one's too, until its runs are
    recorded)."""
    store = conn.store
    exp_id = conn.experiment_id(experiment)
    info = store.experiments.info(exp_id)
    idle: list[str] = []
    # A cancelled one's runs not yet run are recorded as such by the workers that take them.
    waiting = info.status in (ExperimentStatus.pending, ExperimentStatus.running) or (
        info.status == ExperimentStatus.cancelled and info.completed_runs < info.total_runs
    )
    if conn.shared and waiting:
        from fleet.app import BROKER_DOWN
        from fleet.sending import queues_without_workers

        matrix = store.experiments.matrix(exp_id)
        unrenewed = _unrenewed(store, exp_id, matrix.lease_s)
        try:
            idle = queues_without_workers(conn.app, matrix, store, exp_id)
        except BROKER_DOWN as exc:
            # Asking takes a reply queue, which a full broker refuses: the progress, read
            # from the store, stands without it.
            return Status(info, [], str(exc), unrenewed)
        return Status(info, idle, None, unrenewed)
    return Status(info, idle)


def _unrenewed(store: Store, exp_id: str, lease_s: float) -> Unrenewed | None:
    leases = store.leases.state(exp_id)
    left = [s for s in leases.left_s.values() if s < lease_s / 2]
    if not left and not leases.unswept:
        return None
    ago_s, lapse_in_s = (lease_s - min(left), max(left)) if left else (0.0, 0.0)
    return Unrenewed(len(left), ago_s, lapse_in_s, len(leases.unswept))


def status_line(info: ExperimentInfo) -> str:
    """An experiment in one line: id, state, runs, passes, errors, when it was created."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.created_at))
    state = info.status.value
    if info.status == ExperimentStatus.complete and info.errors:
        state = f"complete with {plural(info.errors, 'infrastructure error')}"
    ran = info.completed_runs - info.cancelled - info.not_run
    not_run = f"  {info.not_run} not run (budget)" if info.not_run else ""
    return (
        f"{info.id}  {state:<9} {ran}/{info.total_runs} runs ran  {info.passes} passed  "
        f"{plural(info.errors, 'infrastructure error')}  {info.cancelled} cancelled{not_run}  "
        f"{when}"
    )


def until_reported(info: ExperimentInfo) -> str:
    """What brings a report that is not there yet."""
    if info.status == ExperimentStatus.interrupted:
        return (
            f": its submit was interrupted and its runs not yet run wait; "
            f"`scheduler resume {info.id}` runs them and prints the report, "
            f"`scheduler cancel {info.id}` records them cancelled and prints it"
        )
    if info.status in (ExperimentStatus.pending, ExperimentStatus.running):
        return (
            f": its runs are under way; on a shared broker `scheduler report {info.id} --wait` "
            f"follows them to it, `scheduler status {info.id}` shows how far they are"
        )
    if info.status == ExperimentStatus.cancelled:
        return (
            f": it was cancelled and its runs not yet run are still to be recorded; "
            f"`scheduler report {info.id} --wait` waits for a fleet's workers to record them, "
            f"embedded `scheduler cancel {info.id}` records them here"
        )
    return ""


def report_versions(conn: Connection, experiment: str) -> list[int]:
    """The experiment's report versions: 1 is the runs' own, 2, 3... each rejudge's or
    rescore's; empty until it has finished."""
    return conn.store.reports.versions(conn.experiment_id(experiment))


def current_version(conn: Connection, experiment: str) -> int | None:
    """The version `report` shows by default (Reports.current); None before the first."""
    return conn.store.reports.current(conn.experiment_id(experiment))


def load_report(
    conn: Connection,
    experiment: str | None = None,
    *,
    version: int | None = None,
    runs: bool = False,
    correction: str | None = None,
    alpha: float | None = None,
) -> ExperimentReport:
    """The report of an experiment (default: the latest), as the pydantic model: its
    latest version unless `version`, every RunResult under `runs` with `runs=True`,
    and its tests corrected again with another `correction` (holm, bh, none) or
    `alpha` if given."""
    store = conn.store
    exp_id = conn.experiment_id(experiment)
    versions = store.reports.versions(exp_id)
    if not versions:
        info = store.experiments.info(exp_id)
        raise FleetError(
            f"experiment {exp_id} has no report yet ({status_line(info)}){until_reported(info)}"
        )
    if version is not None and version not in versions:
        raise InputError(
            f"experiment {exp_id} has no report version {version}; its versions: "
            + ", ".join(map(str, versions))
        )
    shown = version or store.reports.current(exp_id, versions) or versions[-1]
    report = store.reports.get(exp_id, shown)
    assert report is not None  # listed as stored
    if runs:
        report = report.model_copy(update={"runs": list(iter_runs(conn, exp_id, shown))})
    if correction is None and alpha is None:
        return report
    from core.analysis.comparison import correct_report

    stored = report.multiplicity
    return correct_report(
        report,
        cast(
            Correction,
            correction or (DEFAULT_CORRECTION if stored is None else stored.correction),
        ),
        alpha or (DEFAULT_ALPHA if stored is None else stored.alpha),
    )


def iter_runs(conn: Connection, experiment: str, version: int = 1) -> Iterator[RunResult]:
    """Every run's RunResult: as it ran (version 1), or as a rejudge or rescore made it."""
    store, exp_id = conn.store, conn.experiment_id(experiment)
    yield from store.results.all(exp_id) if version == 1 else store.reports.runs(exp_id, version)


def evidence_blobs(conn: Connection, exp_id: str) -> dict[str, bytes]:
    """Every run's evidence as stored (compressed JSON), for the html run table.
    Evidence kept as a file in an artifacts folder this machine does not see is
    left out, and the Fleet's console says so."""
    store = conn.store
    try:
        return store.evidence.blobs(exp_id)
    except OSError:
        pass
    found: dict[str, bytes] = {}
    unreadable: list[str] = []
    for run in store.results.all(exp_id):
        try:
            evidence = store.evidence.blob(exp_id, run.run_id)
        except OSError as exc:
            unreadable.append(f"{run.run_id}: {exc}")
            continue
        if evidence is not None:
            found[run.run_id] = evidence
    if unreadable:
        conn.console.print(
            f"note: the evidence of {plural(len(unreadable), 'run')} "
            "is in an artifacts folder this "
            f"machine cannot read, and not in the page (first: {unreadable[0]}); write the "
            "report where that folder is mounted",
            markup=False,
            soft_wrap=True,
        )
    return found


@dataclass(frozen=True)
class LoadedRun:
    experiment_id: str
    run_id: str
    record: RunRecord  # result (as record.version scored it), evidence, deliveries
    unreadable: str | None  # why its evidence is missing: not stored, or its file unreadable here
    versions: tuple[int, ...] = ()  # the experiment's report versions (none before its report)
    version_note: str | None = None  # what made record.version, when it is a later one
    # The run as it ran (version 1), when record.version is a later one: its evidence
    # (gate output, each judgment's answer) is that scoring's.
    first: RunResult | None = None


def load_run(conn: Connection, run: Sequence[str], version: int | None = None) -> LoadedRun:
    """One run with its evidence and deliveries. `run` is its id as one word
    (EXP:TIER:SCENARIO:INDEX, or the end of one that only one run of the 100 latest
    experiments has), or the four words EXP TIER SCENARIO INDEX. Its result as report
    `version` scored it (1: as it ran); default: the version `report` shows by
    default, so that a report's `scheduler show RUN` shows what the report counted."""
    store = conn.store
    exp_id, run_id = _run_of(conn, run)
    versions = store.reports.versions(exp_id)
    if version is not None and version != 1 and version not in versions:
        raise InputError(
            f"experiment {exp_id} has no report version {version}; its versions: "
            + (", ".join(map(str, versions)) or "none yet (the run as it ran is version 1)")
        )
    shown = version or store.reports.current(exp_id, versions) or 1
    note = None
    try:
        evidence = store.evidence.get(exp_id, run_id)
    except OSError as exc:  # a file in an artifacts folder this machine does not see
        evidence, note = None, f"the run's evidence file cannot be read here: {exc}"
    result = store.results.get(exp_id, run_id)
    attempts = evidence.attempts if evidence is not None else store.attempts.of(exp_id, run_id)
    if evidence is None and result is not None and note is None:
        note = (
            "the run's evidence was not stored (the broker refused it, full, or the worker "
            "stopped right after storing the result): its result stands"
        )
        if attempts and attempts[-1].ended_at is None:  # the delivery that stored it
            ended = attempts[-1].model_copy(update={"outcome": outcome(result)})
            attempts = [*attempts[:-1], ended]
    first, version_note = None, None
    if shown > 1:
        scored = store.reports.run(exp_id, shown, run_id)
        if scored is None:
            raise InputError(
                f"run {run_id} has no result in report version {shown} of {exp_id} "
                "(`--version 1`: the run as it ran)"
            )
        first, result = result, scored
        made = store.reports.get(exp_id, shown)
        version_note = made.version_note if made is not None else None
    record = RunRecord(result=result, evidence=evidence, attempts=attempts, version=shown)
    return LoadedRun(exp_id, run_id, record, note, tuple(versions), version_note, first)


def _run_of(conn: Connection, words: Sequence[str]) -> tuple[str, str]:
    """(experiment id, run id) of `load_run`'s words; InputError if there is no such run."""
    store = conn.store
    if len(words) == 4:
        exp_id = conn.experiment_id(words[0])
        run_id = ":".join(words)
    elif len(words) == 1:
        exp_id, run_id = words[0].rsplit(":", 3)[0], words[0]
        if not store.experiments.exists(exp_id):
            found = store.specs.ids_ending(words[0])
            if len(found) != 1:
                listed = "; ".join(found[:5]) + ("; ..." if len(found) > 5 else "")
                raise InputError(
                    f"{len(found)} runs end with {words[0]!r}: {listed}; give more of the run id"
                    if found
                    else f"no run {words[0]!r}{_nearest_run(store, words[0])}: give a run id as "
                    "`report --format json --runs` lists them (EXPERIMENT:TIER:SCENARIO:INDEX), "
                    "or EXP TIER SCENARIO INDEX"
                )
            run_id = found[0]
            exp_id = run_id.rsplit(":", 3)[0]
    else:
        raise InputError(f"give one run id or EXP TIER SCENARIO INDEX, not {len(words)} words")
    if not store.specs.has(exp_id, run_id):
        own = [r.removeprefix(exp_id + ":") for r in store.specs.ids(exp_id)]
        asked = run_id.removeprefix(exp_id + ":")
        from core.matrix import did_you_mean

        hint = did_you_mean(asked, own)
        raise InputError(
            f"experiment {exp_id} has no run {asked!r}{'; ' + hint if hint else ''} "
            f"(its runs are TIER:SCENARIO:INDEX; `scheduler report {exp_id} --format json "
            "--runs` lists them)"
        )
    return exp_id, run_id


def _nearest_run(store: Store, word: str) -> str:
    """ "; did you mean `...`?" for a run id's end whose experiment part names one recent
    experiment's end but whose tier, scenario or index that experiment lacks."""
    from core.matrix import did_you_mean

    parts = word.rsplit(":", 3)
    if len(parts) != 4:
        return ""
    experiments = [e for e in store.experiments.recent_ids(100) if e.endswith(parts[0])]
    if len(experiments) != 1:
        return ""
    (exp_id,) = experiments
    asked = ":".join(parts[1:])
    hint = did_you_mean(asked, [r.removeprefix(exp_id + ":") for r in store.specs.ids(exp_id)])
    return f" ({exp_id} has no run {asked!r}; {hint})" if hint else ""


def compare(
    conn: Connection,
    experiment_a: str,
    experiment_b: str,
    *,
    alpha: float = DEFAULT_ALPHA,
    correction: str = DEFAULT_CORRECTION,
) -> ExperimentComparison:
    """Experiment B against A, per tier and per tier x scenario, from their runs as they
    ran: deltas with effect sizes, Fisher's exact and Mann-Whitney U tests corrected
    together. The Fleet's console notes an unfinished experiment or a rejudged one.
    Either may be a report JSON file with its runs (`report --format json --runs`): a
    baseline kept as a CI artifact, its experiment long gone from the broker."""
    sides = [_side(conn, e) for e in (experiment_a, experiment_b)]
    ids = [info.id for info, _, _ in sides]
    infos = [info for info, _, _ in sides]
    runs = [side_runs for _, side_runs, _ in sides]
    for info in infos:
        if info.status != ExperimentStatus.complete:
            conn.say(f"note: {status_line(info)}: comparing the runs it has", soft_wrap=False)
    for _, _, note in sides:
        if note is not None:
            conn.say(f"note: {note}")
    from core.analysis.comparison import compare_experiments

    result = compare_experiments(
        infos[0], runs[0], infos[1], runs[1], alpha, cast(Correction, correction)
    )
    if not result.tiers:
        raise InputError(f"{ids[0]} and {ids[1]} share no tier; nothing to compare")
    if not any(result.scenarios.values()):
        ran = "; ".join(f"{e} ran {', '.join(s)}" for e, s in result.unmatched_scenarios.items())
        raise InputError(f"{ids[0]} and {ids[1]} share no scenario ({ran}); nothing to compare")
    return result


def _side(conn: Connection, experiment: str) -> tuple[ExperimentInfo, list[RunResult], str | None]:
    """An experiment of the store, or of a report JSON file: its info, its runs, and
    what to note about which version of them they are."""
    if experiment.endswith(".json") or Path(experiment).is_file():
        path = Path(experiment)
        try:
            report = ExperimentReport.model_validate_json(path.read_bytes())
        except OSError as exc:
            raise InputError(f"{experiment}: cannot read: {exc.strerror}") from None
        except ValidationError as exc:
            raise InputError(
                f"{experiment}: not a report JSON ({exc.errors()[0]['msg']}); write one with "
                "`scheduler report EXP --format json --runs > FILE`"
            ) from None
        if report.runs is None:
            raise InputError(
                f"{experiment}: a report without its runs: write it with "
                f"`scheduler report {report.experiment.id} --format json --runs`"
            )
        note = None
        if report.version > 1:
            note = f"{experiment} is report version {report.version}: compare reads its runs so"
        return report.experiment, report.runs, note
    store = conn.store
    exp_id = conn.experiment_id(experiment)
    versions = store.reports.versions(exp_id)
    note = None
    if len(versions) > 1:
        # `report` shows the latest version: say that this is not it.
        note = (
            f"{exp_id} has report versions {versions[0]}-{versions[-1]}; compare reads its "
            "runs as they ran (version 1), not a rejudge's or rescore's"
        )
    return store.experiments.info(exp_id), store.results.all(exp_id), note
