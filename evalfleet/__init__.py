"""evalfleet's Python API: what the `scheduler` commands do, callable from a script or
a notebook, with the results as the pydantic models the reports are made of.

Everything goes through a Fleet: the shared broker it is given (or
EVALFLEET_BROKER_URL), else the embedded Redis of ./.evalfleet with local worker
processes, both started for it and stopped when it closes.

    import evalfleet

    with evalfleet.Fleet(create=True) as fleet:          # embedded: no servers needed
        sent = evalfleet.submit(fleet, "examples/matrix.yaml", workers=2)
        report = evalfleet.wait(fleet, sent.experiment_id)
        print(report.experiment.passes, "of", report.experiment.total_runs, "passed")
        for run in evalfleet.iter_runs(fleet, sent.experiment_id):
            print(run.run_id, run.status.value, run.passed)

Errors are evalfleet.EvalfleetError: InputError for bad input (nothing started),
FleetError when the broker or the workers fail.
"""

from core.errors import (
    BrokerUnreachable,
    ConfigError,
    EvalfleetError,
    ExperimentNotFound,
    FleetError,
    InputError,
    WorkersDied,
)
from core.matrix import Matrix, load_matrix
from core.modelserver import ModelScript, ModelServer, load_model_script
from core.results.report import ExperimentComparison, ExperimentInfo, ExperimentReport
from core.results.run import RunResult, RunStatus
from scheduler.deletion import Doomed, Expired, deletable, delete, expired
from scheduler.experiments import (
    Listed,
    LoadedRun,
    Status,
    compare,
    iter_runs,
    list_experiments,
    load_report,
    load_run,
    report_versions,
    status,
)
from scheduler.fleet import Fleet
from scheduler.running import Sent, cancel, resume, submit, wait
from scheduler.validation import Checked, prepare, validate
from scheduler.versions import NewVersion, rejudge, rescore, wait_version

__all__ = [
    "BrokerUnreachable",
    "Checked",
    "ConfigError",
    "Doomed",
    "EvalfleetError",
    "ExperimentComparison",
    "ExperimentInfo",
    "ExperimentNotFound",
    "ExperimentReport",
    "Expired",
    "Fleet",
    "FleetError",
    "InputError",
    "Listed",
    "LoadedRun",
    "Matrix",
    "ModelScript",
    "ModelServer",
    "NewVersion",
    "RunResult",
    "RunStatus",
    "Sent",
    "Status",
    "WorkersDied",
    "cancel",
    "compare",
    "deletable",
    "delete",
    "expired",
    "iter_runs",
    "list_experiments",
    "load_matrix",
    "load_model_script",
    "load_report",
    "load_run",
    "prepare",
    "rejudge",
    "report_versions",
    "rescore",
    "resume",
    "status",
    "submit",
    "validate",
    "wait",
    "wait_version",
]
