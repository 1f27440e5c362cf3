"""`scheduler preflight`: each tier x scenario run once, on this machine, before an
experiment spends anything.

Each cell runs as a worker would run it (its workspace prepared, its setup, its real
command line and environment, its transcript parser and gates), with the model
answered by the scripted model server (or, `--live`, by the real providers); the
judge is called only with `--judge` (else only its key is looked for). Its files are
the copy a worker of this machine would use (worker.files.staged) and it is confined
as a worker confines it (worker.confinement): on a root machine, as a user of its own
that cannot read the submitter's home or the files evaluation keeps hidden, so an
agent that only works as root fails here, not in every real run. Two more
runs of the workspace check the scenario itself: with no agent at all its gates
must not all pass (else they check nothing), and with its `reference:` solution
they must (else the task is broken). Gates that read the transcript (their model's
`reads_transcript`: `no_transcript_errors`) are left out of those two: there is no
transcript.

A benchmark task (a scenario with an environment and a verifier) is checked in its
jail, or in its container when a tier runs under `sandbox: docker`, as its runs are
(worker.confinement, worker.docker_sandbox), once for all tiers: its verifier on the
untouched environment must not pass, and after its oracle (the task's solution,
the `oracle` preset) it must.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from core.errors import SetupError
from core.evaluation.evaluate import (
    JUDGE_SCORE,
    EvaluationContext,
    GateSite,
    evaluate_run,
)
from core.evaluation.gates import run_gates
from core.evaluation.shell import run_shell
from core.evaluation.verifier import verify
from core.files.bundle import Bundle
from core.matrix import AgentConfig, Gate, Matrix, Scenario, Tier
from core.modelserver import ModelServer
from core.results.record import Record
from core.results.run import (
    GATES_FAILED,
    JUDGE_ERROR,
    GateResult,
    JudgeResult,
    RunResult,
    RunSpec,
    RunStatus,
)
from core.results.transcript import AgentOutcome
from worker.agents.command import run_command_agent
from worker.confinement import Confinement, confined
from worker.docker_sandbox import agent_container
from worker.files import LocalFiles, staged
from worker.run import agent_env, gate_enclosure, run_agent, task_environment
from worker.workspace import RunDir, chown_tree, prepare, run_setup, with_tests

# Placed in the environment of a preset whose key is unset: the scripted server
# takes any key, and a CLI without one would not start.
PLACEHOLDER_KEY = "preflight-scripted-server"

# How the CLIs refuse their command line, as the pinned ones print it on stderr (with
# nothing on stdout, and a non-zero exit): clap (Codex: "error: unexpected argument
# '--full-auto' found"), commander (Claude Code: "error: unknown option '--x'", and
# its root check of --dangerously-skip-permissions), yargs (Gemini CLI: "Unknown
# arguments: x", "Invalid values:"; OpenCode prints only its usage, which opens with
# the command's synopsis, "opencode run [message..]"), and any "Usage:" line.
_REFUSED = re.compile(
    r"error: (unexpected argument|unknown option|unrecognized subcommand|invalid value)"
    r"|^Unknown arguments?: |^Invalid values?:|^Not enough non-option arguments"
    r"|cannot be used with root/sudo privileges|^Usage: ",
    re.MULTILINE,
)


class CellCheck(Record):
    """One tier x scenario's preflight: each column as the table shows it, and the
    problems that make the experiment unsound, one sentence each."""

    tier: str
    scenario: str
    cli: str  # "found", "missing", "refuses flags", or "-" without a preset
    run: str  # the run's outcome
    transcript: str
    gates: str  # "passed/total" after the scripted run
    vacuous: str  # "yes" when an untouched workspace passes every gate
    reference: str
    judge_key: str
    agent_key: str  # "set", "missing NAME" (the check ran with a placeholder), "-" without one
    spend_usd: float | None  # this run's cost times the cell's runs
    problems: list[str]


def preflight(
    matrix: Matrix,
    bundle: Bundle,
    server: ModelServer | None,
    *,
    judge: bool = False,
    judge_key_elsewhere: bool = False,
) -> list[CellCheck]:
    """Every tier x scenario of `matrix` (its files `bundle`, as validate collected
    them) checked once, its model calls answered by
    `server` (already serving), or by the real providers when it is None (`--live`:
    real keys, real spend). `judge`: a judged run's judge is called for real.
    `judge_key_elsewhere`: a judge key unset here is the workers' (not a problem)."""
    files = staged(matrix, bundle)
    pointed = files.matrix if judge else _without_judges(files.matrix)
    scripted: contextlib.AbstractContextManager[set[str]] = (
        contextlib.nullcontext(set()) if server is None else _scripted_environment(matrix, server)
    )
    if server is not None:
        pointed = _pointed_at(pointed, server)
    files = replace(files, matrix=pointed)
    with scripted as placeholders:
        tasks = {s.id: _task_soundness(files, s) for s in pointed.scenarios if _is_task(s)}
        return [
            _check(
                matrix,
                files,
                tier,
                scenario,
                judge_key_elsewhere,
                tasks.get(scenario.id),
                scripted=server is not None,
                placeholders=placeholders,
            )
            for tier in matrix.tiers
            for scenario in matrix.scenarios
        ]


@dataclass(frozen=True)
class _Soundness:
    """A scenario's own checks, the same for every tier: the table's columns, and the
    problems they found."""

    vacuous: str
    reference: str
    problems: list[str]


# wide: one caller, whose values these are: an object would be built for this call alone
def _check(
    original: Matrix,
    files: LocalFiles,
    tier: Tier,
    scenario: Scenario,
    key_elsewhere: bool,
    task: _Soundness | None,
    *,
    scripted: bool,
    placeholders: set[str],
) -> CellCheck:
    problems: list[str] = []
    agent = files.matrix.agent_for(tier)
    if (
        scripted
        and agent.sandbox == "docker"
        and agent.preset_spec
        and agent.preset_spec.calls_model
    ):
        problems.append(_UNREACHABLE)
    spec = RunSpec(experiment_id="preflight", run_id=f"preflight:{tier.id}:{scenario.id}:0",
                   tier=tier.id, scenario=scenario.id, run_index=0)  # fmt: skip
    run, transcript, gates, spend = "not run", "-", "-", None
    judged: JudgeResult | None = None
    cli, result = _run_cell(files, spec, agent, scenario, problems)
    if result is not None:
        run = result.status.value
        said = (RunStatus.completed, RunStatus.tampered)  # the latter by _run_cell
        if result.status not in said and cli != "missing":
            problems.append(f"the agent's run was {run}: {_agent_reason(result.fail_reason)}")
        transcript = "unrecognised" if result.transcript_unrecognised else (
            result.transcript_format or "-")  # fmt: skip
        gates = f"{result.gates_passed}/{result.gates_total}"
        judged = result.judge
        if result.cost_usd is not None:
            spend = result.cost_usd * files.matrix.runs_for(scenario)
    if task is not None:
        vacuous, reference = task.vacuous, task.reference
        problems += task.problems
    else:
        vacuous = _vacuous(files, spec, scenario, problems)
        reference = _reference(files, spec, scenario, agent.timeout_s, problems)
    judge_key = _judge_key(original, scenario, problems, key_elsewhere)
    if judged is not None and judge_key == "set":
        if judged.error is not None:
            problems.append(f"the judge failed: {judged.error}")
            judge_key = "failed"
        elif judged.weighted_score is not None:
            judge_key = f"judged {judged.weighted_score:.2f}"
    return CellCheck(
        tier=tier.id, scenario=scenario.id, cli=cli, run=run, transcript=transcript,
        gates=gates, vacuous=vacuous, reference=reference, judge_key=judge_key,
        agent_key=_agent_key(agent.api_key_env, placeholders), spend_usd=spend,
        problems=problems,
    )  # fmt: skip


def _run_cell(
    files: LocalFiles, spec: RunSpec, agent: AgentConfig, scenario: Scenario, problems: list[str]
) -> tuple[str, RunResult | None]:
    """The cell's run as a worker runs it: the table's `cli` column and its result, None
    when it could not be set up (said in `problems`, as is a CLI not found and an agent
    that changed the files evaluation reads: they are restored for the next cell, as
    for the next run, and the result is `tampered`)."""
    matrix, cli = files.matrix, "-"
    try:
        with _prepared(files, spec, agent) as (run_dir, env, jail):
            if agent.cli is not None:
                cli = "found" if shutil.which(agent.cli, path=env.get("PATH")) else "missing"
                if cli == "missing":
                    problems.append(f"agent CLI {agent.cli!r} is not on the agent's PATH")
            with agent_container(agent, spec.run_id, run_dir, env, scenario) as container:
                prompt = scenario.prompt_text()
                outcome = run_agent(matrix, spec, run_dir, prompt, env, container, jail)
                if cli == "found" and refuses_flags(agent.cli or "", outcome):
                    cli = "refuses flags"
                jail.end_agent()
                gate_env = with_tests(run_dir, scenario, env, jail.user)
                verifier_site = task_environment(run_dir, scenario, jail, gate_env, container)
                enclosure = gate_enclosure(container, jail, gate_env)
                site = GateSite(run_dir.workspace, gate_env, enclosure, task=verifier_site)
                output = run_dir.agent_output(outcome, agent)
                result = evaluate_run(EvaluationContext(spec, matrix, site), output).result
    except SetupError as exc:
        problems.append(f"setup failed: {exc}")
        return cli, None
    tampered = files.repaired()
    if tampered is None:
        return cli, result
    problems.append(
        f"the agent changed {tampered}, a file evaluation reads: its runs would be "
        "recorded tampered and pass nothing"
    )
    return cli, result.tampered_with(tampered)


def refuses_flags(cli: str, outcome: AgentOutcome) -> bool:
    """Whether the CLI `cli` refused the command line it was given (a flag it does not
    know, a value it does not take, a flag it will not take as root) rather than ran:
    it exited non-zero at once with its usage error on stderr and nothing on stdout."""
    if outcome.timed_out or outcome.exit_code in (None, 0) or outcome.stdout.strip():
        return False
    synopsis = re.compile(rf"^{re.escape(cli)} \S+ \[", re.MULTILINE)  # yargs' usage
    return bool(_REFUSED.search(outcome.stderr) or synopsis.search(outcome.stderr))


def _agent_reason(fail_reason: str | None) -> str:
    """The agent's part of a fail reason: the verdicts of the gates and the judge differ
    from scenario to scenario and are the table's, not a problem."""
    verdicts = (GATES_FAILED, JUDGE_SCORE, JUDGE_ERROR)
    return "; ".join(r for r in (fail_reason or "").split("; ") if not r.startswith(verdicts))


def _workspace_gates(scenario: Scenario) -> list[Gate]:
    return [g for g in scenario.evaluation.gates if not g.reads_transcript]


def _vacuous(files: LocalFiles, spec: RunSpec, scenario: Scenario, problems: list[str]) -> str:
    gates = _workspace_gates(scenario)
    if not gates:
        return "-"
    try:
        with _prepared(files, spec) as (run_dir, env, jail):
            results = _gated(gates, run_dir, scenario, env, jail)
    except SetupError:
        return "-"  # said once already, by the agent's run
    if all(r.passed for r in results):
        problems.append("its gates pass on the untouched workspace: they check nothing")
        return "yes"
    return "no"


def _reference(
    files: LocalFiles, spec: RunSpec, scenario: Scenario, timeout_s: float, problems: list[str]
) -> str:
    if scenario.reference is None:
        return "-"
    try:
        with _prepared(files, spec) as (run_dir, env, jail):
            # With the worker's rights: the reference is the experimenter's, and may read
            # what no agent may (the scenario's `solution:`). What it wrote is then the
            # run's user's, as an agent's work would be, for the gates.
            ran = run_shell(scenario.reference, run_dir.workspace, timeout_s=timeout_s, env=env)
            if jail.user is not None:
                chown_tree(run_dir.workspace, jail.user)
            results = _gated(_workspace_gates(scenario), run_dir, scenario, env, jail)
    except SetupError:
        return "-"
    if not ran.ok:
        why = "timed out" if ran.timed_out else f"exit code {ran.exit_code}"
        problems.append(f"the reference solution failed ({why}): {ran.stderr.strip()[-300:]}")
        return "fails"
    failed = [r for r in results if not r.passed]
    if failed:
        names = "; ".join(f"{r.name or r.gate_type}: {r.message}" for r in failed)
        problems.append(f"the reference solution does not pass its gates: {names}")
        return "fails"
    return "passes"


def _gated(
    gates: list[Gate], run_dir: RunDir, scenario: Scenario, env: dict[str, str], jail: Confinement
) -> list[GateResult]:
    """`gates` on the run's workspace as a worker runs them: as its user, the tests in."""
    gate_env = with_tests(run_dir, scenario, env, jail.user)
    enclosure = gate_enclosure(None, jail, gate_env)
    return run_gates(gates, run_dir.workspace, target_commands=[], env=gate_env,
                     enclosure=enclosure)  # fmt: skip


def _is_task(scenario: Scenario) -> bool:
    return scenario.environment is not None and scenario.verifier is not None


# What stands in for the agent when the verifier checks the untouched environment.
_UNTOUCHED = AgentConfig(command="true")

# The scripted model server listens on this machine's loopback (core.modelserver), which
# a container does not share: a preset CLI in one cannot reach it.
_UNREACHABLE = (
    "the scripted model server (on this machine's loopback) is unreachable from the "
    "agent's container (`sandbox: docker`: its loopback is its own), so its CLI cannot be "
    "checked here: check the CLI under `sandbox: bwrap`, or run preflight with `--live`"
)


def _sandbox_of(matrix: Matrix) -> dict[str, object]:
    """How a task's own checks (untouched, oracle) are confined: in a container when a
    tier runs under `sandbox: docker` (the first such tier's `docker:`), as its runs
    are; else in its jail (bwrap)."""
    for tier in matrix.tiers:
        agent = matrix.agent_for(tier)
        if agent.sandbox == "docker":
            return {"sandbox": "docker", "docker": agent.docker}
    return {}


def _task_soundness(files: LocalFiles, scenario: Scenario) -> _Soundness:
    """A task's verifier on its untouched environment (it must not pass) and after its
    oracle (it must), each in the task's jail."""
    problems: list[str] = []
    vacuous, reference = "-", "-"
    matrix = files.matrix
    sandbox = _sandbox_of(matrix)
    try:
        untouched = _UNTOUCHED.model_copy(update=sandbox)
        vacuous = "no" if _unmet(files, scenario, untouched, solves=False) else "yes"
        if vacuous == "yes":
            problems.append(
                "its verifier passes the untouched environment: its tests check nothing"
            )
        if scenario.solution is not None:
            agent = matrix.agent
            timeout_s = scenario.agent_timeout_s or agent.timeout_s
            oracle = AgentConfig(preset="oracle", timeout_s=timeout_s).model_copy(update=sandbox)
            why = _unmet(files, scenario, oracle, solves=True)
            reference = "fails" if why else "passes"
            if why:
                problems.append(f"the oracle (the task's solution) fails: {why}")
    except SetupError as exc:
        problems.append(f"the task's environment could not be set up: {exc}")
    return _Soundness(vacuous, reference, problems)


def _unmet(files: LocalFiles, scenario: Scenario, agent: AgentConfig, solves: bool) -> str | None:
    """Why the task's verifier does not pass it after the oracle `agent` ran (`solves`;
    else `agent` stands for the untouched environment), or why the oracle itself
    failed; None when it passes. Raises SetupError."""
    assert scenario.verifier is not None
    spec = RunSpec(experiment_id="preflight",
                   run_id=f"preflight:{scenario.id}:{'oracle' if solves else 'untouched'}",
                   tier=files.matrix.tiers[0].id, scenario=scenario.id, run_index=0)  # fmt: skip
    with (
        _prepared(files, spec, agent) as (run_dir, env, jail),
        agent_container(agent, spec.run_id, run_dir, env, scenario) as container,
    ):
        if solves:
            ran = run_command_agent(agent, run_dir, env, container, confinement=jail)
            jail.end_agent()
            if not ran.completed:
                how = "timed out" if ran.timed_out else ran.error or f"exit code {ran.exit_code}"
                said = ran.stderr.strip()[-300:]
                return f"solve.sh: {how}" + (f": {said}" if said else "")
        site = task_environment(
            run_dir, scenario, jail, with_tests(run_dir, scenario, env, jail.user), container
        )
        assert site is not None  # a task has a verifier
        return verify(scenario.verifier, site).unmet(scenario.pass_reward)


def _agent_key(name: str | None, placeholders: set[str]) -> str:
    """Whether the agent's key is set here. Not a problem: the workers may hold it
    (submit refuses it unless told so), but the check ran without the real one."""
    if not name:
        return "-"
    return f"missing {name}" if name in placeholders or not os.environ.get(name) else "set"


def _judge_key(matrix: Matrix, scenario: Scenario, problems: list[str], elsewhere: bool) -> str:
    if not scenario.evaluation.judge_enabled or matrix.judge is None:
        return "-"
    name = matrix.judge.api_key_env
    if name and not os.environ.get(name):
        if elsewhere:  # --allow-missing-judge-key: the workers hold it
            return "workers'"
        problems.append(f"it is judged but the judge's key {name} is unset")
        return "unset"
    return "set"


@contextlib.contextmanager
def _prepared(
    files: LocalFiles, spec: RunSpec, agent: AgentConfig | None = None
) -> Iterator[tuple[RunDir, dict[str, str], Confinement]]:
    """A run's folder as a worker prepares it, confined as `agent` (default: the
    tier's) would be, set up as its user; all of it removed afterwards."""
    matrix = files.matrix
    tier, scenario = matrix.tier(spec.tier), matrix.scenario(spec.scenario)
    prompt = scenario.prompt_text()
    run_dir = prepare(spec.run_id, tier, scenario, prompt)
    try:
        env = agent_env(spec, matrix, run_dir, prompt)
        with confined(
            agent or matrix.agent_for(tier),
            run_dir,
            files.folder,
            files.hidden_paths(),
            scenario,
            away=files.submitted_from(),
        ) as jail:
            run_setup(run_dir, scenario, env, jail.user)
            yield run_dir, env, jail
    finally:
        run_dir.discard()


def _without_judges(matrix: Matrix) -> Matrix:
    scenarios = [
        s.model_copy(update={"evaluation": s.evaluation.model_copy(update={"judge": None})})
        for s in matrix.scenarios
    ]
    return matrix.model_copy(update={"scenarios": scenarios})


def _pointed_at(matrix: Matrix, server: ModelServer) -> Matrix:
    """The built-in agent's endpoint is the matrix's `base_url`: the server's instead."""
    url = f"{server.base_url}/v1"
    agent = matrix.agent
    if agent.base_url is not None:
        agent = agent.model_copy(update={"base_url": url})
    tiers = [
        t.model_copy(update={"agent": t.agent.model_copy(update={"base_url": url})})
        if t.agent is not None and t.agent.base_url is not None
        else t
        for t in matrix.tiers
    ]
    return matrix.model_copy(update={"agent": agent, "tiers": tiers})


@contextlib.contextmanager
def _scripted_environment(matrix: Matrix, server: ModelServer) -> Iterator[set[str]]:
    """The server's base URLs (which presets pass through) and a placeholder for each
    unset key, in this process's environment while the preflight runs; yields the
    names of the keys it stands in for."""
    keys = {matrix.agent_for(t).api_key_env for t in matrix.tiers} - {None}
    placeholders = {k for k in keys if k and not os.environ.get(k)}
    changes: Mapping[str, str] = {
        **dict.fromkeys(placeholders, PLACEHOLDER_KEY),
        **server.environment(),
    }
    before = {name: os.environ.get(name) for name in changes}
    os.environ.update(changes)
    try:
        yield placeholders
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
