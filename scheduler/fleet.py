"""`Fleet`, the object a user holds: evalfleet's broker, store and workers as one
connection, and what the `scheduler` commands do as its methods.

    with Fleet.embedded() as fleet:                     # no servers needed
        sent = fleet.submit("examples/matrix.yaml")
        report = fleet.wait(sent)                       # an ExperimentReport
        failed = [r.run_id for r in fleet.runs(sent) if not r.passed]

    with Fleet.connect("redis://broker:6379/0") as fleet:
        print(fleet.report().experiment.id)             # the latest experiment's

The connection behind it (scheduler.connection: the store, the Celery app, the
local workers) is private; each method is one call of scheduler.running,
.experiments, .versions or .deletion over it. The CLI holds a Fleet too
(scheduler.cli.context) and calls the same methods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from core.analysis.comparison import ALPHA, CORRECTION
from core.broker_url import ENV_BROKER, configured_broker
from core.errors import InputError
from core.results.report import ExperimentComparison, ExperimentReport, ExperimentStatus
from core.results.run import RunResult
from core.store.retention import Deleted
from scheduler import deletion
from scheduler import experiments as reading
from scheduler.connection import Connection
from scheduler.deletion import Doomed, Expired
from scheduler.experiments import Listed, LoadedRun, Status

if TYPE_CHECKING:
    from scheduler.running import Sent
    from scheduler.validation import Checked
    from scheduler.versions import Asked, NewVersion


class Fleet:
    """evalfleet's fleet as one object. Make one with `Fleet.embedded()` (a private Redis
    under ./.evalfleet and local workers, started for it) or `Fleet.connect(url)` (a
    shared broker, whose workers run elsewhere); closing it (or the end of its `with`
    block) stops what it started. Every method taking an experiment takes its id or the
    `Sent` that `submit` or `resume` returned; `wait` also takes the `NewVersion` of a
    `rejudge` or `rescore`."""

    def __init__(self, connection: Connection):
        """Use `Fleet.embedded()` or `Fleet.connect(url)`."""
        self._connection = connection

    @classmethod
    def embedded(
        cls,
        *,
        workers: int | None = None,
        queue: str | None = None,
        console: Console | None = None,
        create: bool = True,
        hinted: Callable[[str], str] = str,
    ) -> Fleet:
        """The embedded Redis of ./.evalfleet, started on first use (with `create=False`
        only where one was started before: InputError otherwise), and `workers` local
        worker processes (default: one per CPU) once runs are sent. `queue`: where runs
        go (default: EVALFLEET_QUEUE, else evalfleet). Progress bars and notes go to
        `console` (default: nowhere; `rich.console.Console()` shows them), the commands
        they suggest completed by `hinted`."""
        connection = Connection(
            None, create=create, workers=workers, queue=queue, console=console, hinted=hinted
        )
        return cls(connection)

    @classmethod
    def connect(
        cls,
        url: str | None = None,
        *,
        queue: str | None = None,
        console: Console | None = None,
        hinted: Callable[[str], str] = str,
    ) -> Fleet:
        """A shared broker: `url` (redis://, rediss:// or redis+socket://), else
        EVALFLEET_BROKER_URL, with the password EVALFLEET_BROKER_PASSWORD_FILE or
        EVALFLEET_BROKER_PASSWORD gives. The fleet's workers (`scheduler worker`) run
        the runs; `submit` returns once they are sent. Notes as `embedded`'s."""
        broker = configured_broker(url)  # BrokerURLError now, not at first use
        if broker is None:
            raise InputError(
                f"no broker: pass Fleet.connect a URL (redis://host:6379/0) or set "
                f"{ENV_BROKER}; Fleet.embedded() needs none"
            )
        return cls(Connection(broker, queue=queue, console=console, hinted=hinted))

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop what this Fleet started (local workers, the embedded Redis)."""
        self._connection.close()

    def start_aside(self) -> None:
        """Start the embedded Redis on a thread of its own, while the caller reads and
        checks its matrix (the first call that needs the store waits for it); a caller
        that then sends nothing calls `close_unused`. Nothing to do on a shared broker."""
        if not self.shared:
            self._connection.open_aside()

    def close_unused(self) -> None:
        """`close`, for a Fleet that stored nothing (a refused matrix): the ./.evalfleet
        folder goes too if it was made for it, leaving the folder as it was found."""
        self._connection.close_unused()

    @property
    def shared(self) -> bool:
        """True on a shared broker: the fleet's workers run elsewhere, on their own."""
        return self._connection.shared

    def experiment_id(self, experiment: str | None = None) -> str:
        """`experiment` when the store has it (ExperimentNotFound, with the nearest ids,
        if not), the latest experiment's id when None."""
        return self._connection.experiment_id(experiment)

    def broker_gone(self) -> str | None:
        """Why the broker will not answer again, when it will not: an embedded Redis that
        the command which started it has stopped."""
        return self._connection.broker_gone()

    def has_experiment(self, experiment: str) -> bool:
        """Whether the store has `experiment`; False, opening nothing, before it is open."""
        return self._connection.has_experiment(experiment)

    # Running. Their modules are imported when first called: they check matrices and
    # plan runs, which the commands that only read never need.

    def submit(
        self,
        matrix: str | Path | Checked,
        *,
        experiment_id: str | None = None,
        allow_missing_keys: bool = False,
    ) -> Sent:
        """Record a new experiment of `matrix` (a matrix file, or what `prepare` checked)
        and send its runs; embedded, the local workers start first and take them. A
        matrix whose agents' or judge's API key is not set here is refused (ConfigError)
        unless `allow_missing_keys` (the workers have it)."""
        from scheduler.running import submit

        return submit(
            self._connection,
            matrix,
            experiment_id=experiment_id,
            allow_missing_keys=allow_missing_keys,
        )

    def wait(self, experiment: str | Sent | NewVersion) -> ExperimentReport:
        """Block until the report exists, sweeping for lost runs on the way (a progress
        bar on the console): the experiment's, or a rejudge's or rescore's version's.
        Raises WorkersDied when the local workers exit first."""
        from scheduler.running import wait
        from scheduler.versions import NewVersion, wait_version

        if isinstance(experiment, NewVersion):
            return wait_version(self._connection, experiment)
        return wait(self._connection, _id(experiment))

    def asked(self, version: NewVersion) -> Asked:
        """What a finished rejudge or rescore asked the judge: the judgments of the runs
        it judged again, and the runs it kept as they were."""
        from scheduler.versions import asked

        return asked(self._connection, version)

    def resume(
        self, experiment: str | Sent, *, budget: float | None = None, retry_errors: bool = False
    ) -> Sent | None:
        """Send again the runs of `experiment` that have no result and are neither running
        nor queued: a cancelled one's never-started runs; with `budget` (a new ceiling on
        the agents' spend), those the old one kept from starting; with `retry_errors`,
        those that ended in an infrastructure error. None when every run has a result."""
        from scheduler.running import resume

        return resume(self._connection, _id(experiment), budget=budget, retry_errors=retry_errors)

    def cancel(self, experiment: str | Sent) -> tuple[str, ExperimentStatus, Sent | None]:
        """Cancel an experiment: runs not yet started are recorded as cancelled, running
        ones finish. Its id, its status before (a finished one is left as it was) and,
        embedded, what was sent to finish it: this Fleet's local workers record the
        rest (none other may be running), and `wait` gives the report."""
        from scheduler.running import cancel

        return cancel(self._connection, _id(experiment))

    def interrupt(self, experiment: str) -> bool:
        """Pause an experiment whose embedded submit or resume was interrupted, until
        `resume` or `cancel`; whether it was paused (not if it had finished)."""
        from scheduler.running import interrupt

        return interrupt(self._connection, experiment)

    # Reading.

    def experiments(self) -> list[Listed]:
        """Every experiment, oldest first, with its report versions and stored bytes."""
        return reading.list_experiments(self._connection)

    def status(self, experiment: str | Sent | None = None) -> Status:
        """An experiment's progress (default: the latest), and on a shared broker the
        queues it waits on that no worker consumes."""
        return reading.status(self._connection, _maybe_id(experiment))

    def report(
        self,
        experiment: str | Sent | None = None,
        *,
        version: int | None = None,
        runs: bool = False,
        correction: str | None = None,
        alpha: float | None = None,
    ) -> ExperimentReport:
        """An experiment's report (default: the latest experiment): its latest version
        unless `version`, with every RunResult under `runs` if asked, its tests corrected
        again with another `correction` (holm, bh, none) or `alpha` if given."""
        return reading.load_report(
            self._connection,
            _maybe_id(experiment),
            version=version,
            runs=runs,
            correction=correction,
            alpha=alpha,
        )

    def report_versions(self, experiment: str | Sent) -> list[int]:
        """The report versions: 1 is the runs' own, 2, 3... each rejudge's or rescore's."""
        return reading.report_versions(self._connection, _id(experiment))

    def current_version(self, experiment: str | Sent) -> int | None:
        """The version `report` shows by default: the latest, but for those a resume that
        ran runs again has superseded; None before the first report."""
        return reading.current_version(self._connection, _id(experiment))

    def runs(self, experiment: str | Sent, version: int = 1) -> Iterator[RunResult]:
        """Every run's RunResult: as it ran (version 1), or as a version made it."""
        return reading.iter_runs(self._connection, _id(experiment), version)

    def run(self, *run: str, version: int | None = None) -> LoadedRun:
        """One run with its evidence and deliveries: its id (EXP:TIER:SCENARIO:INDEX, or
        the end of one that only one run of the 100 latest experiments has), or the four
        words EXP, TIER, SCENARIO, INDEX; its result as report `version` scored it
        (default: the version `report` shows by default; 1: as it ran)."""
        return reading.load_run(self._connection, run, version)

    def evidence_blobs(self, experiment: str) -> dict[str, bytes]:
        """Every run's evidence as stored (compressed JSON), as the HTML report embeds it."""
        return reading.evidence_blobs(self._connection, experiment)

    def compare(
        self,
        experiment_a: str | Sent,
        experiment_b: str | Sent,
        *,
        alpha: float = ALPHA,
        correction: str = CORRECTION,
    ) -> ExperimentComparison:
        """Experiment B against A, per tier and tier x scenario, from their runs as they
        ran; either may be a report JSON file with its runs (`report --format json
        --runs`)."""
        return reading.compare(
            self._connection,
            _id(experiment_a),
            _id(experiment_b),
            alpha=alpha,
            correction=correction,
        )

    # New report versions.

    def rejudge(
        self,
        experiment: str | Sent,
        *,
        judge_model: str | None = None,
        rubric: str | Path | None = None,
        repeats: int | None = None,
        fresh: bool = False,
    ) -> NewVersion:
        """Judge every run of a finished experiment again from its stored evidence, with
        another judge model, rubric file or number of judgments if given, and with
        `fresh` none from the judgment cache: a new report version (`wait` gives its
        report)."""
        from scheduler.versions import rejudge

        return rejudge(
            self._connection,
            _id(experiment),
            judge_model=judge_model,
            rubric=rubric,
            repeats=repeats,
            fresh=fresh,
        )

    def rescore(
        self, experiment: str | Sent, *, gates_from: str | Path | None = None
    ) -> NewVersion:
        """Run the gates again on the runs' archived workspaces (the experiment's own
        gates, or those of the matrix file `gates_from`): a new report version."""
        from scheduler.versions import rescore

        return rescore(self._connection, _id(experiment), gates_from=gates_from)

    # Deleting.

    def deletable(self, experiment: str | Sent, *, force: bool = False) -> Doomed:
        """What deleting `experiment` would remove; InputError while it runs (unless
        `force`)."""
        return deletion.deletable(self._connection, _id(experiment), force=force)

    def delete(self, experiment: str | Sent, *, force: bool = False) -> Deleted:
        """Delete an experiment and everything stored with it; InputError while it runs
        (unless `force`)."""
        return deletion.delete(self._connection, _id(experiment), force=force)

    def expired(self, older_than_s: float, *, force: bool = False) -> Expired:
        """The experiments created longer ago than `older_than_s`: those to delete, and
        the running ones kept (unless `force`)."""
        return deletion.expired(self._connection, older_than_s, force=force)


def _id(experiment: str | Sent) -> str:
    return experiment if isinstance(experiment, str) else experiment.experiment_id


def _maybe_id(experiment: str | Sent | None) -> str | None:
    return None if experiment is None else _id(experiment)
