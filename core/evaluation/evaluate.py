"""From a finished agent process to a complete RunResult: the three layers and the
metrics, and the run's evidence (what the gates ran and saw, the parsed events,
the workspace's changes).

A run's outcome is its agent's and its gates' (and judge's) alone: everything
built after the agent ran is built from whatever bytes it left (file names,
output, an events file), made encodable first (core.evidence.text), and what
still cannot be built is said in the evidence's cuts, never the run's status.
The parsers refuse the figures that could not be scored (core.transcripts);
should reading or scoring what the agent left raise all the same, the run is
the agent's failure (`agent_error`, UNSCORED), counted in the statistics: an
infrastructure error would leave it out of them, which an agent failing its
task would want.

Pure of Celery: the worker calls `evaluate_run` after the agent, and tests call
it directly with a workspace, a transcript and a loopback judge.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from core.evaluation.gates import Enclosure, gate_runs
from core.evaluation.judge import Judge, Judgment, JudgmentCache, judge_run
from core.evaluation.verifier import RunEnvironment, Verification, below, verify
from core.evidence.events import compact_events
from core.evidence.models import Excerpt, GateEvidence, JudgeInputs, RunEvidence
from core.evidence.redact import redact, redact_record, secret_values
from core.evidence.text import encodable, last_line_first, last_lines
from core.files.changes import Snapshot, patch, snapshot, summarize_changes
from core.matrix import (
    AgentConfig,
    Matrix,
    ModelPrice,
    Rubric,
    Scenario,
    Tier,
    Verifier,
    load_rubric,
)
from core.metrics import formulas
from core.metrics.interaction import interaction_metrics, target_commands
from core.metrics.limits import Spend, crossed, spend_of
from core.metrics.pricing import price_for
from core.metrics.process import process_metrics
from core.metrics.tokens import token_metrics
from core.results.run import (
    GATES_FAILED,
    JUDGE_ERROR,
    NO_USAGE,
    UNREAD_TRANSCRIPT,
    GateResult,
    InteractionMetrics,
    RunResult,
    RunSpec,
    RunStatus,
)
from core.results.transcript import AgentOutcome, CommandRecord, Transcript
from core.transcripts import parse_transcript, render_transcript
from core.transcripts.outage import outage_of

Phase = Callable[[str], None]
CAPTURE_CUT = (
    "stdout, stderr: the agent printed more than agent.max_transcript_bytes ({}); "
    "the middle was cut as it ran"
)
EVENTS_CUT = (
    "events file: the agent wrote more than agent.max_transcript_bytes ({}); the {} bytes "
    "of its middle were cut unread"
)
CHANGES_MISSING = "changes summary, patch: not built, the workspace could not be read: "
# How a run whose output could not be read or scored fails (core docstring above).
UNSCORED = "the agent's output could not be scored: "


@dataclass(frozen=True)
class Evaluated:
    """A run's result and its evidence. The evidence is whole: the caller redacts
    and bounds it (core.evidence.caps) before it is stored."""

    result: RunResult
    evidence: RunEvidence


def _ignore(_: object) -> None:
    return None


@dataclass(frozen=True)
class AgentOutput:
    """What the agent left, the transcript phase's input: its outcome, the events file
    it wrote and `session_text`, the record a preset's CLI keeps of its session (its
    requests, where stdout sums them)."""

    outcome: AgentOutcome
    events_text: str | None = None
    session_text: str | None = None
    events_cut: int = 0  # bytes of the events file left unread in its middle (its cap)


@dataclass(frozen=True)
class GateSite:
    """Where the gates phase runs: the `workspace` and `env` of gate commands;
    `enclosure`, where command gates run (the agent's container); `prepared`, the
    workspace as the agent found it (the summary and the patch of what it changed);
    `task`, where a benchmark task's verifier runs (core.evaluation.verifier), before
    the gates; `on_gated`, told the target commands the transcript gates read once the
    gates ran (kept for rescore)."""

    workspace: Path
    env: Mapping[str, str] | None = None
    enclosure: Enclosure | None = None
    prepared: Snapshot | None = None
    task: RunEnvironment | None = None
    on_gated: Callable[[list[CommandRecord]], None] = _ignore


@dataclass(frozen=True)
class Judging:
    """What judging needs of the machine it runs on: the environment the judge's key is
    read from, the judgment cache, and the values taken out of what the judge keeps."""

    environ: Mapping[str, str]
    judgments: JudgmentCache | None = None
    secrets: Sequence[str] = ()


@dataclass(frozen=True)
class EvaluationContext:
    """One run's evaluation, as each phase reads it: the run (`spec`) and its `matrix`,
    where the gates run (`site`), `environ` (the judge's key; the secrets' default),
    the judgment cache, `secrets` (the values to redact, when the caller has them
    already; default: secret_values(matrix, environ)) and `on_phase`, told each phase
    as it starts (the worker's Flower states)."""

    spec: RunSpec
    matrix: Matrix
    site: GateSite
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    judgments: JudgmentCache | None = None
    secrets: Sequence[str] | None = None
    on_phase: Phase = _ignore

    @cached_property
    def tier(self) -> Tier:
        return self.matrix.tier(self.spec.tier)

    @cached_property
    def agent(self) -> AgentConfig:
        return self.matrix.agent_for(self.tier)

    @cached_property
    def scenario(self) -> Scenario:
        return self.matrix.scenario(self.spec.scenario)

    @cached_property
    def redacted(self) -> Sequence[str]:
        if self.secrets is not None:
            return self.secrets
        return secret_values(self.matrix, self.environ)

    @property
    def judging(self) -> Judging:
        return Judging(self.environ, self.judgments, self.redacted)


@dataclass(frozen=True)
class Read:
    """The transcript phase's answer: what the agent left made encodable, parsed and
    measured, and why its run is no work of its own (`not_started`), if so."""

    outcome: AgentOutcome
    events_text: str | None
    transcript: Transcript
    commands: list[CommandRecord]
    interaction: InteractionMetrics
    model: str | None
    price: ModelPrice | None
    limit: str | None
    outage: str | None
    not_started: str | None
    unscored: str | None = None
    events_cut: int = 0


@dataclass(frozen=True)
class Checked:
    """The gates phase's answer: the verifier's verdict, the gates' results (redacted:
    the judge's prompt shows them) and evidence, the workspace's changes, the evidence
    that could not be built (`missing`), and `not_started` as the verifier left it."""

    not_started: str | None
    verification: Verification | None = None
    gates: list[GateResult] = field(default_factory=list)
    gate_evidence: list[GateEvidence] = field(default_factory=list)
    changes: str = ""
    patch: str = ""
    missing: list[str] = field(default_factory=list)


def evaluate_run(context: EvaluationContext, output: AgentOutput) -> Evaluated:
    """The run's result and evidence, phase by phase: the transcript read, the gates
    (and a task's verifier) run, the judge asked, the verdict scored."""
    outcome, events_text = _encodable(output.outcome, output.events_text)
    output = dataclasses.replace(output, outcome=outcome, events_text=events_text)
    try:
        read = _read(context, output)
    except Exception as exc:  # the agent's bytes: its failure, never the runner's
        read = _not_read(context, output, f"{UNSCORED}{exc!r}")
    checked = _check(context, read)
    judgment = _judge(context, read, checked)
    try:
        result = _score(context, read, checked, judgment)
    except Exception as exc:  # as above
        result = _unscored(context, read, checked, judgment, f"{UNSCORED}{exc!r}")
    return Evaluated(result, _evidence(context, read, checked, judgment))


def _read(context: EvaluationContext, output: AgentOutput) -> Read:
    """The transcript phase: the agent's output (made encodable) parsed, its commands
    and interaction measured, its spend held to its limits, and whether it ran at all."""
    matrix, agent, scenario = context.matrix, context.agent, context.scenario
    outcome, events_text = output.outcome, output.events_text
    transcript = parse_transcript(
        agent.transcript,
        outcome.stdout,
        events_text,
        scenario.target.command_pattern,
        session_text=output.session_text,
        stderr=outcome.stderr,
    )
    model = agent.model or transcript.model
    price = price_for(model, matrix.pricing)
    limits = matrix.limits_for(context.tier, scenario)
    not_started = _not_started(outcome, transcript, context.redacted)
    outage = transcript.outage or outage_of(outcome.error)
    if outage is not None:
        not_started = f"model provider outage: {redact(outage, context.redacted)}"
    return Read(
        outcome=outcome,
        events_text=events_text,
        events_cut=output.events_cut,
        transcript=transcript,
        commands=target_commands(transcript, scenario.target),
        interaction=interaction_metrics(transcript, scenario.target, completed=outcome.completed),
        model=model,
        price=price,
        limit=outcome.limit or crossed(limits, spend_of(transcript, price, model=model)),
        outage=outage,
        not_started=not_started,
    )


def _not_read(context: EvaluationContext, output: AgentOutput, why: str) -> Read:
    """The transcript phase of an agent whose output could not be read: it ran (its
    output is there), with nothing of it measured; its gates still run, as evidence."""
    outcome, transcript = output.outcome, Transcript(format=context.agent.transcript)
    return Read(
        outcome=outcome,
        events_text=output.events_text,
        events_cut=output.events_cut,
        transcript=transcript,
        commands=[],
        interaction=InteractionMetrics(completed=outcome.completed),
        model=context.agent.model,
        price=None,
        limit=outcome.limit,
        outage=None,
        not_started=None,
        unscored=why,
    )


def _check(context: EvaluationContext, read: Read) -> Checked:
    """The gates phase: a task's verifier, then the gates, then what the agent changed.
    An agent that never ran (or whose model provider was away) has nothing to check or
    judge: its run is an infrastructure error, and gates that happen to pass must not
    look like its work."""
    if read.not_started is not None:
        return Checked(read.not_started)
    site, scenario, secrets = context.site, context.scenario, context.redacted
    verification = None
    if scenario.verifier is not None:
        verification = _verified(scenario.verifier, site.task, context.on_phase)
        if verification.error is not None:
            return Checked(verification.error, verification)
    context.on_phase("gates")
    runs = gate_runs(
        scenario.evaluation.gates,
        site.workspace,
        target_commands=read.commands,
        env=site.env,
        enclosure=site.enclosure,
    )
    site.on_gated(read.commands)
    changes, changed, missing = "", "", []
    try:
        after = snapshot(site.workspace)
        changes = summarize_changes(site.workspace, site.prepared, after=after)
        max_chars = int(context.matrix.evidence.max_run_kb * 1024)
        changed = patch(site.prepared, after, max_chars=max_chars)
    except Exception as exc:  # evidence only: the agent's outcome stands without it
        missing.append(f"{CHANGES_MISSING}{exc!r}")
    return Checked(
        None,
        verification,
        gates=[redact_record(run.result, secrets) for run in runs],
        gate_evidence=[run.evidence for run in runs],
        changes=changes,
        patch=changed,
        missing=missing,
    )


def _judge(context: EvaluationContext, read: Read, checked: Checked) -> Judgment | None:
    """The judge phase: a judged scenario's judge on what the gates phase found."""
    scenario = context.scenario
    if checked.not_started is not None or not scenario.evaluation.judge_enabled:
        return None
    if read.unscored is not None:  # failed whatever a judge says: not worth its spend
        return None
    context.on_phase("judge")
    matrix, secrets = context.matrix, context.redacted
    inputs = judge_inputs(matrix, scenario, read, checked.changes, secrets)
    return judge_run(judge_for(matrix, scenario, context.judging), inputs, gates=checked.gates)


def _score(
    context: EvaluationContext, read: Read, checked: Checked, judgment: Judgment | None
) -> RunResult:
    """The score phase: the RunResult with its metrics, spend and verdict."""
    spec, outcome, transcript = context.spec, read.outcome, read.transcript
    gates, verification = checked.gates, checked.verification
    status = _status(outcome, transcript, read.limit)
    result = RunResult.of(
        spec,
        RunStatus.agent_error if read.unscored and status is RunStatus.completed else status,
        **_ran(read),
        interaction=read.interaction,
        gates=gates,
        gates_passed=sum(g.passed for g in gates),
        gates_total=len(gates),
        judge=judgment.result if judgment is not None else None,
        transcript_format=transcript.format,
        transcript_malformed_lines=transcript.malformed_lines
        + transcript.events_file_malformed_lines,
        transcript_truncated=outcome.output_truncated or read.events_cut > 0,
        transcript_unfinished=not transcript.finished,
        transcript_unrecognised=checked.not_started is None and _wrong_format(outcome, transcript),
    )
    result = _with_tokens_and_cost(result, transcript, read.price, read.model)
    if read.unscored is not None:  # nothing read is not nothing spent
        result.cost_usd, result.cost_unknown_reason = None, read.unscored
    if verification is not None:
        result.rewards = verification.rewards
    verdict = [verification.failure] if verification is not None and verification.failure else []
    reasons = [*_agent_reasons(result, outcome, transcript, context.redacted), *verdict]
    if read.unscored is not None:
        reasons.insert(0, read.unscored)
    result = scored(result, context.matrix, context.scenario, reasons)
    if checked.not_started is not None:
        result = _not_run(result, checked.not_started, read)
    if context.scenario.process is not None:
        result.process = process_metrics(transcript.commands, context.scenario.process)
    result.tokens = token_metrics(transcript.components, read.price)
    return result


def _ran(read: Read) -> dict[str, Any]:
    """What a result says of how its run ran: its limit, model, times and exit code."""
    outcome = read.outcome
    return {
        "limit": read.limit,
        "model": read.model,
        "started_at": outcome.started_at,
        "ended_at": outcome.ended_at,
        "duration_seconds": max(outcome.ended_at - outcome.started_at, 0.0),
        "exit_code": outcome.exit_code,
    }


def _unscored(
    context: EvaluationContext,
    read: Read,
    checked: Checked,
    judgment: Judgment | None,
    why: str,
) -> RunResult:
    """The result of a run whose figures could not be scored: failed, with what its
    gates and judge found, none of its metrics and its cost unknown."""
    outcome, gates = read.outcome, checked.gates
    status = _status(outcome, Transcript(format=read.transcript.format), read.limit)
    return RunResult.of(
        context.spec,
        RunStatus.agent_error if status is RunStatus.completed else status,
        **_ran(read),
        interaction=InteractionMetrics(completed=outcome.completed),
        gates=gates,
        gates_passed=sum(g.passed for g in gates),
        gates_total=len(gates),
        judge=judgment.result if judgment is not None else None,
        transcript_format=read.transcript.format,
        transcript_truncated=outcome.output_truncated or read.events_cut > 0,
        passed=False,
        pass_rate=0.0,
        impl_rate=0.0,
        composite_score=0.0,
        cost_unknown_reason=why,
        fail_reason=why,
    )


def _not_run(result: RunResult, not_started: str, read: Read) -> RunResult:
    """Nothing gated, nothing judged: no credit either (an empty gate list's rates would
    read as all of it)."""
    outage = read.outage is not None
    return result.model_copy(
        update={
            "status": RunStatus.infra_error,
            "passed": False,
            "pass_rate": 0.0,
            "impl_rate": 0.0,
            "composite_score": 0.0,
            "layered_composite": None,
            "cost_of_pass": None,
            "fail_reason": not_started,
            "outage": outage,
            "retry_after_s": read.transcript.retry_after_s if outage else None,
        }
    )


def _evidence(
    context: EvaluationContext, read: Read, checked: Checked, judgment: Judgment | None
) -> RunEvidence:
    outcome, verification = read.outcome, checked.verification
    limit = context.agent.max_transcript_bytes
    cuts = [CAPTURE_CUT.format(limit)] if outcome.output_truncated else []
    if read.events_cut:
        cuts.append(EVENTS_CUT.format(limit, read.events_cut))
    return RunEvidence(
        experiment_id=context.spec.experiment_id,
        run_id=context.spec.run_id,
        stdout=Excerpt.whole(outcome.stdout),
        stderr=Excerpt.whole(outcome.stderr),
        transcript=Excerpt.whole(read.events_text or ""),
        events=compact_events(read.transcript),
        gates=checked.gate_evidence,
        verifier=verification.evidence if verification is not None else None,
        judge=judgment.evidence if judgment is not None else None,
        changes_summary=checked.changes,
        patch=Excerpt.whole(checked.patch),
        cuts=[*cuts, *checked.missing],
    )


def _verified(verifier: Verifier, task: RunEnvironment | None, on_phase: Phase) -> Verification:
    """The task's verdict on the run; a caller that gave no environment to run the
    verifier in (a check of the gates alone) gets no rewards, which fails the run."""
    if task is None:
        return Verification({}, "verifier: not run (no environment given to run it in)",
                            GateEvidence())  # fmt: skip
    on_phase("verifier")
    return verify(verifier, task)


def _encodable(outcome: AgentOutcome, events_text: str | None) -> tuple[AgentOutcome, str | None]:
    """What the agent left, as texts every later step can encode: its output is
    decoded leniently already, but an error may quote a file name, and a caller in
    process may hand over any str."""
    update = {"stdout": encodable(outcome.stdout), "stderr": encodable(outcome.stderr)}
    if outcome.error is not None:
        update["error"] = encodable(outcome.error)
    return outcome.model_copy(update=update), (
        encodable(events_text) if events_text is not None else None
    )


def _status(outcome: AgentOutcome, transcript: Transcript, limit: str | None) -> RunStatus:
    if outcome.timed_out:
        return RunStatus.timeout
    if limit is not None:
        return RunStatus.limit
    if not outcome.completed or transcript.agent_reported_error or not transcript.recognised:
        return RunStatus.agent_error
    return RunStatus.completed


# bash's own exit codes for a command it found but could not execute (126) and
# for one it could not find (127).
CANNOT_START_EXIT_CODES = (126, 127)


def _not_started(
    outcome: AgentOutcome, transcript: Transcript, secrets: Sequence[str]
) -> str | None:
    """Why the agent never ran, when it did not: it could not be started at all, or
    the shell could not find or execute its command (exit 126/127 with nothing done:
    no LLM call, no command). None for an agent that ran, however badly."""
    if outcome.error is not None:
        return f"agent could not run: {redact(outcome.error, secrets)}"
    did_something = transcript.llm_calls or transcript.commands
    if outcome.exit_code in CANNOT_START_EXIT_CODES and not did_something:
        tail = redact(outcome.stderr.strip()[-300:], secrets)
        return f"agent could not start (exit {outcome.exit_code})" + (f": {tail}" if tail else "")
    return None


def judge_inputs(
    matrix: Matrix, scenario: Scenario, read: Read, changes: str, secrets: Sequence[str]
) -> JudgeInputs:
    """What the judge is shown of a run, redacted: kept as evidence, so that rejudge
    shows a judge the same without the agent."""
    assert matrix.judge is not None  # validated at load: a judged scenario has a judge
    limit = matrix.judge.max_transcript_chars
    text = redact(render_transcript(read.transcript, read.outcome.stdout, limit), secrets)
    return JudgeInputs(
        task_prompt=scenario.prompt_text(),
        transcript_text=Excerpt.whole(text),
        changes_summary=redact(changes, secrets),
    )


def judge_for(
    matrix: Matrix, scenario: Scenario, judging: Judging, rubric: Rubric | None = None
) -> Judge:
    """The matrix's judge of `scenario`: at a run's end, and again at a rejudge (which
    may bring its own `rubric`, else the scenario's)."""
    config = matrix.judge
    scenario_judge = scenario.evaluation.judge
    assert config is not None and scenario_judge is not None  # validated at load
    return Judge(
        config,
        scenario_judge,
        rubric or load_rubric(scenario_judge.rubric),
        api_key=judging.environ.get(config.api_key_env) if config.api_key_env else None,
        price=price_for(config.model, matrix.pricing),
        cache=judging.judgments,
        secrets=judging.secrets,
    )


def _with_tokens_and_cost(
    result: RunResult, transcript: Transcript, price: ModelPrice | None, model: str | None
) -> RunResult:
    calls = transcript.llm_calls  # with cumulative_input: parse_transcript set it
    spend = spend_of(transcript, price, model=model)
    unknown = None
    if _unread(result, transcript, spend):
        # Nothing read is not nothing spent: its usage may be in what could not be read.
        spend = dataclasses.replace(spend, cost_usd=None)
        unknown = UNREAD_TRANSCRIPT
    elif spend.cost_usd is None and not spend.recorded:
        unknown = NO_USAGE if price is not None else f"{NO_USAGE}; nor has model {model!r} a price"
    elif spend.cost_usd is None:
        unknown = f"no price known for model {model!r}; add it under `pricing:`"
    return result.model_copy(
        update={
            "llm_calls": calls,
            "input_tokens": spend.input_tokens,
            "output_tokens": spend.output_tokens,
            "cache_read_tokens": spend.cache_read_tokens,
            "cache_write_tokens": spend.cache_write_tokens,
            "base_context": formulas.base_context(calls),
            "context_growth_avg": formulas.context_growth_avg(calls),
            "cost_usd": spend.cost_usd,
            "cost_unknown_reason": unknown,
        }
    )


def _unread(result: RunResult, transcript: Transcript, spend: Spend) -> bool:
    """Whether a run's spend is unknown for want of a transcript rather than a price: it
    wrote one (an events file, output) of which nothing was read: no call, no token, no
    cost reported."""
    wrote = result.transcript_unrecognised or result.transcript_malformed_lines > 0
    seen = transcript.llm_calls or spend.tokens or transcript.reported_cost_usd is not None
    return wrote and not seen


def scored(
    result: RunResult, matrix: Matrix, scenario: Scenario, agent_reasons: Sequence[str]
) -> RunResult:
    """The verdict from the result's status, gates, judge and a task's rewards: passed,
    the rates, the composites and the fail reason (`agent_reasons`, what the agent's
    part of the run and a verifier that gave no rewards say, then the gates', the
    rewards' and the judge's). Rejudge scores a new judge this way."""
    judge = result.judge
    judge_score = judge.weighted_score if judge is not None else None
    gates_ok = result.gates_passed == result.gates_total
    rewards_ok = scenario.verifier is None or (
        bool(result.rewards) and all(r >= scenario.pass_reward for r in result.rewards.values())
    )
    # Only an agent that finished by itself can pass, whatever its gates say.
    passed = (
        result.status is RunStatus.completed
        and gates_ok
        and rewards_ok
        and (judge is None or judge.passed)
    )
    pass_rate = formulas.pass_rate(passed)
    impl_rate = formulas.impl_rate(
        judge_score, result.gates_passed, result.gates_total, passed=passed
    )
    update: dict[str, object] = {
        "passed": passed,
        "pass_rate": pass_rate,
        "impl_rate": impl_rate,
        "composite_score": formulas.composite_score(
            pass_rate, impl_rate, matrix.scoring.pass_weight, matrix.scoring.impl_weight
        ),
        "judge_cost_usd": judge.cost_usd if judge is not None else None,
    }
    if result.cost_usd is not None:
        update["cost_of_pass"] = formulas.cost_of_pass(result.cost_usd, pass_rate)
    if scenario.evaluation.composite is not None:
        update["layered_composite"] = formulas.layered_composite(
            result.gates_passed,
            result.gates_total,
            judge_score,
            result.interaction,
            scenario.evaluation.composite,
        )
    reasons = [*agent_reasons, *_verdict_reasons(result, scenario)]
    if judge is not None and judge.error is not None:
        could_pass = result.status is RunStatus.completed and gates_ok and rewards_ok
        if could_pass:
            # The judge never answered a run only its verdict could decide: no result.
            update["status"] = RunStatus.infra_error
            reasons.insert(0, f"{JUDGE_ERROR}{judge.error}")
        else:
            # Failed whatever the judge says: counted so, its judge score missing.
            reasons.append(f"{JUDGE_ERROR}{judge.error}")
    update["fail_reason"] = "; ".join(reasons) if reasons and not passed else None
    return result.model_copy(update=update)


# How the fail reasons of the judge begin (rejudge tells them, and the gates' by
# core/results.GATES_FAILED, the judge's error by core/results.JUDGE_ERROR and the
# rewards' by verifier.REWARD_BELOW, from the agent's own by these).
JUDGE_SCORE = "judge score "
AGENT_TIMED_OUT = "agent timed out"


def _agent_reasons(
    result: RunResult, outcome: AgentOutcome, transcript: Transcript, secrets: Sequence[str]
) -> list[str]:
    reasons: list[str] = []
    if outcome.timed_out:  # after how long: its limit is the matrix's, or a task's
        reasons.append(f"{AGENT_TIMED_OUT} after {outcome.ended_at - outcome.started_at:.1f} s")
    elif outcome.error:
        reasons.append(f"agent could not run: {outcome.error}")
    elif outcome.stopped:
        reasons.append(f"agent stopped: {outcome.stopped}")
    elif outcome.exit_code not in (0, None):
        # The error the agent reported says why in its own words (said below); stderr's
        # tail would be noise before it (OpenCode's: a stack trace), and is evidence.
        tail = "" if transcript.agent_reported_error else last_lines(outcome.stderr, 300)
        reasons.append(
            f"agent exited with code {outcome.exit_code}"
            + (f": {redact(last_line_first(tail), secrets)}" if tail else "")
        )
    if _wrong_format(outcome, transcript):
        expected = "in a CLI format" if transcript.format == "auto" else transcript.format
        reasons.append(
            f"transcript not recognised: no line of the agent's output is {expected} "
            "(check `agent.transcript`)"
        )
    elif not transcript.recognised:
        reasons.append("no transcript: the agent wrote nothing on stdout")
    if result.limit is not None and outcome.limit is None:  # crossed, but not watched
        reasons.append(result.limit)
    if transcript.agent_reported_error:
        reasons.append(f"agent reported an error: {transcript.agent_reported_error}")
    return reasons


def _wrong_format(outcome: AgentOutcome, transcript: Transcript) -> bool:
    """The agent wrote output and none of it is in the format the matrix names: the
    matrix likely names the wrong one. An agent that wrote nothing (it could not read
    its prompt, it died at once) says nothing about the format."""
    return not transcript.recognised and bool(outcome.stdout.strip())


def _verdict_reasons(result: RunResult, scenario: Scenario) -> list[str]:
    reasons = []
    failed = [g.name or g.gate_type for g in result.gates if not g.passed]
    if failed:
        reasons.append(f"{GATES_FAILED}{', '.join(failed)}")
    low = below(result.rewards, scenario.pass_reward)
    if low is not None:
        reasons.append(low)
    judge = result.judge
    if judge is not None and judge.error is None and not judge.passed:
        reasons.append(f"{JUDGE_SCORE}{judge.weighted_score:.2f} < {judge.pass_threshold:.2f}")
    return reasons
