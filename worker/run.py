"""One run, start to finish, as a worker executes it. Never raises.

Idempotent by run_id: a stored final result is returned, not re-run, so a
redelivered message (worker killed, runner cancelled) cannot count twice.
A run whose model provider failed (rate limit, overload, quota, authentication:
an `outage`) stores nothing while deliveries remain: `RetryLater` says when to
send it again (the wait the provider stated, else a doubling back-off), and the
next delivery's result lists the outages before it. The last allowed delivery
stores its outage as the infrastructure error it is.
Deliveries are counted in Redis and capped. While a delivery runs it holds the
run's lease (worker.heartbeat), so a run whose worker died is sent again
within minutes (fleet.recovery). Secrets are taken out of the result
before it is stored. With a `budget:`, a run reserves its projected cost
before it starts and settles it once its result is stored (core.store.ledger);
one that does not fit is recorded `not_run` without starting.

A run stores its evidence with its result (worker.run_records).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import string
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

import redis
from celery.exceptions import SoftTimeLimitExceeded

from core.errors import BundleError, RetryLater, RunInProgress, SetupError, WorkspaceTooLarge
from core.evaluation.evaluate import EvaluationContext, GateSite, evaluate_run
from core.evaluation.gates import Enclosure
from core.evaluation.shell import ShellResult, kill_groups_by_env, pid_mark, run_shell
from core.evaluation.verifier import MAX_OUTPUT_BYTES as VERIFIER_OUTPUT_BYTES
from core.evaluation.verifier import RunEnvironment
from core.evidence.models import RunEvidence
from core.evidence.redact import redact, redact_record, secret_values
from core.evidence.text import visible
from core.files.archive import pack
from core.files.changes import snapshot
from core.matrix import TESTS_DIR, Matrix, Scenario, WorkspaceArchive
from core.metrics.pricing import price_for
from core.results.report import ExperimentStatus
from core.results.run import NOT_RUN_NOTE, RunResult, RunSpec, RunStatus, error_key
from core.results.transcript import AgentOutcome, CommandRecord
from core.settings import setting
from core.store import Store
from core.store.attempts import Delivery
from core.store.evidence import EncodedEvidence
from core.store.health import HealthNote
from core.store.results import Finished
from core.wording import plural
from fleet.app import BROKER_DOWN
from worker.agents.command import run_command_agent
from worker.agents.openai_agent import run_openai_agent
from worker.confinement import Confinement, confined
from worker.docker_sandbox import Container, agent_container
from worker.environ import inherited
from worker.files import LocalFiles, local_files
from worker.grace import HandBack
from worker.heartbeat import Lease, holder_died_here
from worker.phase_clock import PhaseClock
from worker.run_records import (
    delivery_ended,
    encode,
    end_delivery,
    evidence_cap,
    keep_evidence,
    stored_with_result,
    whole_evidence,
)
from worker.workspace import (
    MARKER,
    SAFE_PYTHON,
    RunDir,
    clear_dead_deliveries,
    fresh_rewards,
    git_identity,
    own_home,
    prepare,
    put_away,
    run_setup,
    take_back,
    with_tests,
)

Phase = Callable[[str], None]
log = logging.getLogger(__name__)

# A run's calls to a broker that is away (fleet.app.BROKER_DOWN) are tried again for
# about a minute.
_RETRY_WAITS_S = (1, 2, 4, 8, 15, 30)
# After a provider outage: the first wait when the provider stated none (doubled per
# delivery), and the longest wait honoured (a "resets tomorrow" is not waited for).
ENV_OUTAGE_BACKOFF_S = "EVALFLEET_OUTAGE_BACKOFF_S"
MAX_OUTAGE_WAIT_S = 900.0
T = TypeVar("T")
# What a run's attempt produced: its result, and its evidence when it got as far as an agent.
Attempted = tuple[RunResult, RunEvidence | None]


def execute(
    spec: RunSpec,
    store: Store,
    on_phase: Phase = lambda phase: None,
    outages: list[str] | None = None,
    worker: str | None = None,
    continues: str = "",
) -> RunResult:
    """Raises BROKER_DOWN when Redis stays away: that is not the run's fault, so no
    result is recorded; the run's message or its lease brings it back. Raises
    RetryLater after a provider outage while deliveries remain, RunInProgress when
    another delivery runs the run, ExperimentPaused while its experiment is
    interrupted. `outages`: the earlier deliveries' outages, kept on the result;
    `continues`: the lease holder of the delivery that met the last one. `worker`: the
    name its deliveries are recorded under (default: the host name)."""
    started = time.time()
    matrix = _matrix(store, spec.experiment_id)
    lease = Lease(store, spec, matrix.lease_s)
    clock = PhaseClock(on_phase)

    def begin(after: str) -> Delivery:
        # Patient here too: a run that neither holds a lease nor keeps its message
        # (a reject cannot requeue while Redis is away) would be lost.
        return patiently(
            lambda: store.attempts.begin(
                spec,
                lease.holder,
                lease.seconds,
                worker=worker or socket.gethostname(),
                continues=after,
            )
        )

    try:
        delivery = begin(continues)
    except RunInProgress as busy:
        # Celery's requeue of a pool process killed mid-run: its lease is live, but
        # its holder is a dead process of this machine, so waiting for the lease
        # to lapse would only delay the run.
        if not holder_died_here(busy.holder):
            raise
        log.warning("run %s: its delivery died on this machine; this one takes over", spec.run_id)
        delivery = begin(busy.holder)
    if delivery.stored is not None:
        return delivery.stored
    secrets = secret_values(matrix, os.environ, store.url)
    evidence = None
    try:
        with lease.held(), _handing_back(store, spec, delivery.attempts):
            result, evidence = _attempt(spec, matrix, delivery, started, secrets, clock, store)
    except BROKER_DOWN:
        raise
    except SoftTimeLimitExceeded:
        why = "run exceeded its time limit (setup + agent + gates + judge)"
        result = error_result(spec, why, delivery.attempts, started)
    except Exception as exc:  # the chord must fire whatever happens: record, don't raise
        result = error_result(spec, f"internal error: {exc!r}", delivery.attempts, started)
        result.fail_reason = f"{result.fail_reason}\n{traceback.format_exc(limit=5)}"
    phases = clock.seconds()
    result = redact_record(result, secrets)
    seen = [*(outages or []), result.fail_reason or "outage"] if result.outage else outages
    result = result.model_copy(update={"outages": seen or []})
    if result.outage and delivery.attempts < matrix.max_attempts:
        wait_s = outage_wait_s(result.retry_after_s, delivery.attempts)
        patiently(lambda: lease.hold_through(wait_s))
        why = visible(result.fail_reason or "")
        log.warning("run %s: %s; retrying in %.0f s", spec.run_id, why, wait_s)
        end_delivery(store, result, delivery.attempts, "sent again")
        raise RetryLater(wait_s, result.outages, holder=lease.holder)
    whole = whole_evidence(matrix, result, evidence, delivery, started, phases, secrets)
    encoded = encode(whole)
    finished = _finish(store, matrix, result, lease.holder, stored_with_result(matrix, encoded))
    if finished.saved:
        if matrix.budget is not None:
            patiently(lambda: store.ledger.settle(result))
        _after_health(store, result, finished.stopped)
        keep_evidence(store, matrix, whole, encoded, finished.evidence)
        return result
    # A late duplicate loses the HSETNX race; report what is actually stored.
    return store.results.get(spec.experiment_id, spec.run_id) or result


@contextlib.contextmanager
def _handing_back(store: Store, spec: RunSpec, number: int) -> Iterator[None]:
    """Delivery `number`, should its worker hand it back (HandBack): no result, and `show`
    says why."""
    try:
        yield
    except HandBack as back:
        then = "back to its queue" if back.requeued else "a sweep sends it again"
        delivery_ended(store, spec, number, f"handed back ({back.why}): {then}")
        raise


def outage_wait_s(stated_s: float | None, attempts: int) -> float:
    """The wait before the next delivery: what the provider stated, else a back-off
    doubling per delivery; never more than MAX_OUTAGE_WAIT_S."""
    backoff_s = setting(ENV_OUTAGE_BACKOFF_S)
    wait_s = stated_s if stated_s is not None else backoff_s * 2 ** (attempts - 1)
    return min(max(wait_s, 0.0), MAX_OUTAGE_WAIT_S)


def _finish(
    store: Store, matrix: Matrix, result: RunResult, holder: str, evidence: EncodedEvidence | None
) -> Finished:
    """The run's last step: its result, its tier's fail-fast count and its `evidence`
    (when small: worker.run_records) stored in one step (core.store.results,
    `finish`). A finished run's work is worth keeping through a Redis restart, so
    the step waits for a broker that is away."""
    health, cap = _health_note(matrix, result), evidence_cap(matrix)
    return patiently(
        lambda: store.results.finish(
            result, holder, health=health, evidence=evidence, evidence_cap=cap
        )
    )


def _health_note(matrix: Matrix, result: RunResult) -> HealthNote | None:
    """Fail-fast: the first results of a tier tell whether its set-up works (None: a
    run that never started says nothing of it)."""
    not_run = (result.fail_reason or "").endswith(NOT_RUN_NOTE)
    if result.status in (RunStatus.cancelled, RunStatus.not_run) or not_run:
        return None
    error = error_key(result.fail_reason) if result.is_infra_error else None
    return HealthNote(result.tier, error, matrix.fail_fast)


def _after_health(store: Store, result: RunResult, stopped: bool) -> None:
    """After the stored result's fail-fast count: the log line of the tier it stopped,
    and the transcript format its agent's output was not in."""
    if stopped:  # only the same infrastructure error stops a tier
        why = visible(error_key(result.fail_reason))
        log.error("tier %s stopped: its first runs all failed with: %s", result.tier, why)
    if result.transcript_unrecognised:  # the follower warns once (scheduler.follow)
        try:
            store.health.note_unrecognised(
                result.experiment_id, result.tier, result.transcript_format or "?"
            )
        except redis.RedisError as exc:  # the result is stored; this is only bookkeeping
            log.warning("run %s: unrecognised output not noted: %s", result.run_id, exc)


@functools.lru_cache(maxsize=32)
def _matrix(store: Store, experiment_id: str) -> Matrix:
    """A submitted matrix never changes: validate it once per worker process, not per run."""
    return patiently(lambda: store.experiments.matrix(experiment_id))


def patiently(call: Callable[[], T]) -> T:
    """A Redis call, tried again while Redis is away or full for up to about a minute;
    then its BROKER_DOWN error."""
    for wait_s in _RETRY_WAITS_S:
        try:
            return call()
        except BROKER_DOWN:
            time.sleep(wait_s)
    return call()


# wide: one caller, whose values these are: an object would be built for this call alone
def _attempt(
    spec: RunSpec,
    matrix: Matrix,
    delivery: Delivery,
    started: float,
    secrets: list[str],
    on_phase: Phase,
    store: Store,
) -> Attempted:
    attempts = delivery.attempts
    # A delivery whose pool process was killed (this run's, or another's) left its
    # agent, setup or gate running on this machine with nothing left to stop it.
    # Only dead ones: a live delivery of this run, superseded or not, is its own.
    for dead in clear_dead_deliveries():
        log.warning("run %s: stopped what dead delivery %s left running", spec.run_id, dead)
    if delivery.status == ExperimentStatus.cancelled:
        # An earlier delivery began it (its submit was interrupted, its worker lost): it
        # started, and was not run again.
        when = "before this run started" if attempts == 1 else (
            "after this run was interrupted (its earlier delivery did not finish): not run again"
        )  # fmt: skip
        cancelled = error_result(
            spec, f"experiment cancelled {when}", attempts, started, RunStatus.cancelled
        )
        return cancelled, None
    if delivery.halted is not None:
        return error_result(spec, delivery.halted + NOT_RUN_NOTE, attempts, started), None
    if attempts > matrix.max_attempts:
        gave_up = error_result(
            spec,
            f"gave up after {plural(attempts - 1, 'delivery')}: each ended without a result "
            "(the run killed its worker or the worker was lost)",
            attempts,
            started,
        )
        return gave_up, None
    try:
        # Its paths lead to this machine's copy of the experiment's files.
        local = patiently(lambda: local_files(store, spec.experiment_id))
    except (BundleError, OSError) as exc:
        return error_result(spec, f"the experiment's files: {exc}", attempts, started), None
    if matrix.budget is not None:
        reservation = store.ledger.reserve(spec, matrix)
        if not reservation.fits:
            reason = f"not run: {reservation.refused}"
            return error_result(spec, reason, attempts, started, RunStatus.not_run), None
    result, evidence = _run(spec, local, on_phase, started, secrets, store)
    return result.model_copy(update={"attempts": attempts}), evidence


# long: the run's setup, agent and gates within the one try whose finally
# ends everything the run started (its processes, its user, its container, its folder).
def _run(
    spec: RunSpec,
    files: LocalFiles,
    on_phase: Phase,
    started: float,
    secrets: list[str],
    store: Store,
) -> Attempted:
    matrix = files.matrix
    tier = matrix.tier(spec.tier)
    scenario = matrix.scenario(spec.scenario)
    prompt = scenario.prompt_text()
    on_phase("setup")
    before = pid_mark()  # what the delivery starts comes after: see the finally below
    try:
        run_dir = prepare(spec.run_id, tier, scenario, prompt)
    except SetupError as exc:
        return error_result(spec, str(exc), 1, started), None
    # The run's user and (`sandbox: docker`) its container live through the agent
    # and the gates.
    held = contextlib.ExitStack()
    confinement: Confinement | None = None
    try:
        env = agent_env(spec, matrix, run_dir, prompt)
        agent = matrix.agent_for(tier)
        try:
            confinement = held.enter_context(
                confined(
                    agent,
                    run_dir,
                    files.folder,
                    files.hidden_paths(),
                    scenario,
                    away=files.submitted_from(),
                )
            )
            run_setup(run_dir, scenario, env, confinement.user)
            # A task's container seeds the workspace with its image's workdir.
            container = held.enter_context(
                agent_container(agent, spec.run_id, run_dir, env, scenario, files.hidden_paths())
            )
            # What the agent changed (the judge's summary, the evidence's patch) is
            # measured from here.
            prepared = snapshot(run_dir.workspace)
            on_phase("agent")
            outcome = run_agent(matrix, spec, run_dir, prompt, env, container, confinement)
            confinement.end_agent()
            gate_env = with_tests(run_dir, scenario, env, confinement.user)
            task = task_environment(run_dir, scenario, confinement, gate_env, container)
        except SetupError as exc:  # setup commands, the agent's sandbox, its tests
            return error_result(spec, str(exc), 1, started), None
        # Before the gates read them: the experiment's files as shipped, else the run
        # changed them (the folder is restored for the gates and for every other run).
        tampered = files.repaired()
        outcome = outcome.model_copy(
            update={
                "stdout": redact(outcome.stdout, secrets),
                "stderr": redact(outcome.stderr, secrets),
            }
        )
        gated: list[CommandRecord] = []
        site = GateSite(
            run_dir.workspace,
            env=gate_env,
            enclosure=gate_enclosure(container, confinement, gate_env),
            prepared=prepared,
            task=task,
            on_gated=gated.extend,
        )
        context = EvaluationContext(
            spec, matrix, site, judgments=store.judgments, secrets=secrets, on_phase=on_phase
        )
        output = run_dir.agent_output(outcome, agent)
        evaluated = evaluate_run(context, output)
        result, evidence = evaluated.result, evaluated.evidence
        # What the gates ran (the agent's own code among it) may have changed them too.
        after_gates = files.repaired()
        tampered = tampered or after_gates
        if tampered is not None:
            result = result.tampered_with(tampered)
        result.worker = socket.gethostname()
        result.isolation = confinement.isolation
        if matrix.keep_workspaces:
            result.kept_folder = str(run_dir.root)
        if matrix.workspace_archive is not None and result.gates_total:
            unarchived = _archive(store, matrix.workspace_archive, run_dir, result, gated, secrets)
            if unarchived is not None:
                evidence = evidence.model_copy(update={"cuts": [*evidence.cuts, unarchived]})
        return result, evidence
    finally:
        own_user = confinement is not None and confinement.user is not None
        if matrix.keep_workspaces and own_user:
            take_back(run_dir)  # before its uid is let go, for another delivery to lease
        held.close()
        # Nothing the delivery started outlives it: not even a process that left
        # the agent's process group (setsid), as long as it kept its environment.
        # Every process of a run with a user of its own was that user's, and
        # ended with it (worker.confinement): nothing to look for.
        if not own_user:
            kill_groups_by_env(MARKER, run_dir.marker, since=before)
        if matrix.keep_workspaces:
            run_dir.release()
        else:
            put_away(run_dir, own_user)


def _archive(
    store: Store,
    config: WorkspaceArchive,
    run_dir: RunDir,
    result: RunResult,
    commands: list[CommandRecord],
    secrets: list[str],
) -> str | None:
    """Keep the gated workspace for rescore (matrix `workspace_archive:`), bounded;
    why it was not kept, as the evidence says what it lacks, else None."""
    if config.keep == "failed" and result.passed:
        return None
    try:
        archive = pack(run_dir.workspace, config.max_bytes, commands, secrets)
    except WorkspaceTooLarge as exc:
        log.warning("run %s: %s", result.run_id, exc)
        return str(exc)
    except Exception as exc:  # whatever the agent left: the run's outcome stands without it
        log.warning("run %s: workspace not archived: %r", result.run_id, exc)
        return f"workspace not archived: {exc!r}"
    store.workspaces.save(result.experiment_id, result.run_id, archive)
    return None


def gate_enclosure(
    container: Container | None, confinement: Confinement, env: dict[str, str]
) -> Enclosure | None:
    """Where the run's command gates run: in its container, or as its own user."""
    if container is not None:
        return container.enclosure()
    if confinement.user is not None:
        return Enclosure((), env, confinement.user)
    return None


def task_environment(
    run_dir: RunDir,
    scenario: Scenario,
    confinement: Confinement,
    env: Mapping[str, str],
    container: Container | None = None,
) -> RunEnvironment | None:
    """Where a benchmark task's verifier runs (core.evaluation.verifier): the agent's
    jail or container (after the agent ended), its tests at /tests, a fresh
    /logs/verifier; None for a scenario without a verifier. Raises SetupError."""
    if scenario.verifier is None:
        return None
    has_tests = scenario.tests is not None
    rewards = fresh_rewards(run_dir, confinement.user)
    if container is not None:
        # The container's /tests is bound to the run's copy (worker.docker_sandbox).
        inside = {**container.env, **({"EVALFLEET_TESTS": TESTS_DIR} if has_tests else {})}
        inside |= SAFE_PYTHON
        container.hand_over([rewards], container.verifier_user)

        def in_container(command: str, timeout_s: float, extra: Mapping[str, str]) -> ShellResult:
            argv_prefix, client_env = container.verifier_call({**inside, **extra})
            return run_shell(
                command,
                run_dir.workspace,
                timeout_s=timeout_s,
                env=client_env,
                max_output_bytes=VERIFIER_OUTPUT_BYTES,
                argv_prefix=argv_prefix,
            )

        return RunEnvironment(in_container, rewards)
    binds = {TESTS_DIR: run_dir.tests} if has_tests else {}
    # The gates' home and Python (with_tests), shown in the jail too.
    home, site = run_dir.graders_home, run_dir.graders_python
    argv_prefix = confinement.argv_prefix(run_dir, {**binds, str(home): home, str(site): site})
    # The gates' $EVALFLEET_TESTS is the run folder's copy, which the jail shows at /tests.
    base = {**env, "EVALFLEET_TESTS": TESTS_DIR} if binds else dict(env)
    base |= SAFE_PYTHON

    def run(command: str, timeout_s: float, extra: Mapping[str, str]) -> ShellResult:
        return run_shell(
            command,
            run_dir.workspace,
            timeout_s=timeout_s,
            env={**base, **extra},
            max_output_bytes=VERIFIER_OUTPUT_BYTES,
            argv_prefix=argv_prefix,
            user=confinement.user,
        )

    return RunEnvironment(run, rewards)


# wide: the run's parts its agent needs, which a delivery and the preflight hold apart
def run_agent(
    matrix: Matrix,
    spec: RunSpec,
    run_dir: RunDir,
    prompt: str,
    env: dict[str, str],
    container: Container | None,
    confinement: Confinement | None = None,
) -> AgentOutcome:
    tier = matrix.tier(spec.tier)
    agent = matrix.agent_for(tier)
    scenario = matrix.scenario(spec.scenario)
    if scenario.agent_timeout_s is not None:  # a task's own time limit
        agent = agent.model_copy(update={"timeout_s": scenario.agent_timeout_s})
    limits = matrix.limits_for(tier, scenario)
    price = price_for(agent.model, matrix.pricing)
    if agent.kind == "openai":
        api_key = os.environ.get(agent.api_key_env) if agent.api_key_env else None
        user = confinement.user if confinement is not None else None
        return run_openai_agent(
            agent, prompt, run_dir.workspace, run_dir.events_file, env, api_key, limits, price, user
        )
    return run_command_agent(agent, run_dir, env, container, limits, price, confinement)


def agent_env(spec: RunSpec, matrix: Matrix, run_dir: RunDir, prompt: str) -> dict[str, str]:
    """The agent's environment (README, "matrix.yaml"): what it inherits of the worker's
    (worker.environ.inherited), a preset's home and variables, the run's variables and
    the agent's `env:`."""
    agent = matrix.agent_for(matrix.tier(spec.tier))
    env = inherited(agent, os.environ)
    # Python writes its bytecode beside what it imports: an unconfined agent running a
    # module of the experiment's files would add a __pycache__ to them, which is that
    # run's `tampered`, and another's beside it (their `env:` may say otherwise).
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # Every agent's home is its run's: nothing of the worker user's (logins,
    # settings) is read, nothing is shared between runs (`env: {HOME: ...}` still wins).
    env.update(own_home(run_dir, agent.preset_spec))
    if agent.preset_spec is not None:
        env.update(agent.preset_spec.env)
    env.update(
        {
            "EVALFLEET_MATRIX_DIR": str(matrix.base_dir or ""),
            "PROMPT": prompt,
            "PROMPT_FILE": str(run_dir.prompt_file),
            "EVALFLEET_RUN_ID": spec.run_id,
            MARKER: run_dir.marker,
            "EVALFLEET_TIER": spec.tier,
            "EVALFLEET_SCENARIO": spec.scenario,
            "EVALFLEET_RUN_INDEX": str(spec.run_index),
            "EVALFLEET_EVENTS": str(run_dir.events_file),
            "EVALFLEET_MODEL": agent.model or "",
        }
    )
    # Tier env may build on the worker's: PATH: "${EVALFLEET_MATRIX_DIR}/bin:${PATH}".
    env.update({k: string.Template(v).safe_substitute(env) for k, v in agent.env.items()})
    env.update(git_identity(run_dir, env))
    return env


def error_result(
    spec: RunSpec,
    reason: str,
    attempts: int,
    started: float,
    status: RunStatus = RunStatus.infra_error,
) -> RunResult:
    """A run without an agent result (an infrastructure error, cancelled, not run for
    the budget): counted under its own name, kept out of the statistics."""
    now = time.time()
    return RunResult.of(
        spec,
        status,
        fail_reason=reason,
        attempts=attempts,
        worker=socket.gethostname(),
        started_at=started,
        ended_at=now,
        duration_seconds=now - started,
    )
