"""One run of a rejudge or rescore, as a worker does it: its gates run again on its
archived workspace (rescore), its judge asked again on its stored judge inputs,
the result stored in the new version. No agent is started.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from core.evaluation.evaluate import Judging
from core.evaluation.gates import Enclosure, run_gates
from core.evaluation.rejudge import RejudgePlan, rejudge_run
from core.evidence.redact import redact_record, secret_values
from core.files.archive import ArchivedWorkspace, unpack
from core.files.places import work_root
from core.matrix import Matrix
from core.results.run import REDONE_FAILED, GateResult, RunResult, RunSpec, RunStatus
from core.store import Store
from core.store.judgments import Refreshed
from fleet.app import BROKER_DOWN
from worker.confinement import can_lease_users, run_user
from worker.files import local_matrix
from worker.run import agent_env
from worker.workspace import locked, with_tests


def rejudged(db: Store, experiment_id: str, run_id: str, plan: RejudgePlan) -> RunResult:
    """The run's result in the plan's version: stored once (a redelivery returns it).
    A run with nothing to do again (no judge inputs, no archived workspace) is kept
    as it was; any failure is an infrastructure error of this version, not raised."""
    stored = db.reports.run(experiment_id, plan.version, run_id)
    if stored is not None:
        return stored
    original = db.results.get(experiment_id, run_id)
    if original is None:
        raise LookupError(f"run {run_id} of {experiment_id} has no result to judge again")
    matrix = db.experiments.matrix(experiment_id)
    secrets = secret_values(matrix, os.environ, db.url)
    evidence = db.evidence.get(experiment_id, run_id)
    inputs = evidence.judge.inputs if evidence is not None and evidence.judge is not None else None
    archive = db.workspaces.get(experiment_id, run_id) if plan.rescore else None
    result = original
    # A rescore's run without an archive has no new gates: judged again on its old ones,
    # it would not be kept as it was (its judgments read from the cache, counted anew).
    if archive is not None or (inputs is not None and not plan.rescore):
        try:
            # The rubric, prompt file and gate scripts: this machine's copy of the
            # experiment's files (worker.files), as its runs had them.
            matrix = local_matrix(db, experiment_id)
            gates = None if archive is None else regate(matrix, plan, original, archive, secrets)
            cache = Refreshed(db.judgments) if plan.fresh else db.judgments
            judging = Judging(os.environ, cache, secrets)
            result = rejudge_run(original, matrix, plan, judging, inputs=inputs, gates=gates)
        except BROKER_DOWN:
            raise
        except Exception as exc:  # the chord must fire: the run is an error of this version
            result = original.model_copy(
                update={
                    "status": RunStatus.infra_error,
                    "passed": False,
                    "fail_reason": f"{REDONE_FAILED}{exc!r}",
                }
            )
    result = redact_record(result, secrets)
    db.reports.save_run(plan.version, result)
    return result


def regate(
    matrix: Matrix,
    plan: RejudgePlan,
    original: RunResult,
    archive: ArchivedWorkspace,
    secrets: list[str],
) -> list[GateResult]:
    """The scenario's gates (or the plan's for it) on the run's archived workspace, in
    the environment its agent had, never in a sandbox: as a run user of their own
    where this worker can lease one (worker.confinement), as the run's gates ran. The
    gates run what the agent left (its module imported, its tests): as the worker's
    root they would reach the store's password, every stored result and the hidden
    files."""
    scenario = matrix.scenario(original.scenario)
    gates = plan.gates.get(scenario.id, scenario.evaluation.gates)
    spec = RunSpec(
        experiment_id=original.experiment_id,
        run_id=original.run_id,
        tier=original.tier,
        scenario=original.scenario,
        run_index=original.run_index,
    )
    prompt = scenario.prompt_text()
    with contextlib.ExitStack() as held:
        base = work_root()
        base.mkdir(parents=True, exist_ok=True)
        # In the work folder, which run users may pass through, unlike a private tmp;
        # locked as a delivery's folder, which a sweep deletes should this process die.
        run_dir = locked(Path(tempfile.mkdtemp(prefix="rescore-", dir=base)))
        held.callback(run_dir.discard)  # after the user's processes ended (below)
        unpack(archive, run_dir.workspace)
        run_dir.prompt_file.write_text(prompt, encoding="utf-8")
        env = agent_env(spec, matrix, run_dir, prompt)
        user = held.enter_context(run_user(run_dir)) if can_lease_users() else None
        # The gates' own home, the graders' Python and the hidden tests, as the run had.
        gate_env = with_tests(run_dir, scenario, env, user)
        results = run_gates(
            gates,
            run_dir.workspace,
            target_commands=archive.target_commands,
            env=gate_env,
            enclosure=None if user is None else Enclosure((), gate_env, user),
        )
    return [redact_record(gate, secrets) for gate in results]
