"""evalfleet's Python API: what the `scheduler` commands do, callable from a script or
a notebook, with the results as the pydantic models the reports are made of.

A Fleet is the object to hold: `Fleet.embedded()`, a private Redis under
./.evalfleet with local worker processes, started for it and stopped when it
closes; or `Fleet.connect(url)`, a shared broker whose workers run elsewhere.

    from evalfleet import Fleet

    with Fleet.embedded(workers=2) as fleet:             # no servers needed
        sent = fleet.submit("examples/matrix.yaml")
        report = fleet.wait(sent)
        print(report.experiment.passes, "of", report.experiment.total_runs, "passed")
        for run in fleet.runs(sent):
            print(run.run_id, run.status.value, run.passed)

`validate` and `prepare` check a matrix file without a fleet. Errors are
evalfleet.EvalfleetError: InputError for bad input (nothing started), FleetError
when the broker or the workers fail.
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
from core.store.retention import Deleted
from scheduler.deletion import Doomed, Expired
from scheduler.experiments import Listed, LoadedRun, Status
from scheduler.fleet import Fleet
from scheduler.running import Sent
from scheduler.validation import Checked, prepare, validate
from scheduler.versions import NewVersion

__all__ = [
    "BrokerUnreachable",
    "Checked",
    "ConfigError",
    "Deleted",
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
    "load_matrix",
    "load_model_script",
    "prepare",
    "validate",
]
