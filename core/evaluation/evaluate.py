"""From a finished agent process to a complete RunResult: the three layers and the
metrics, and the run's evidence (what the gates ran and saw, the parsed events,
the workspace's changes).

A run's outcome is its agent's and its gates' (and judge's) alone: everything
built after the agent ran is built from whatever bytes it left (file names,
output, an events file), made encodable first (core.evidence.text), and what
still cannot be built is said in the evidence's cuts, never the run's status.

Pure of Celery: the worker calls `evaluate_run` after the agent, and tests call
it directly with a workspace, a transcript and a loopback judge.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.evaluation.gates import Enclosure, gate_runs
from core.evaluation.judge import Judgment, JudgmentCache, judge_run
from core.evaluation.verifier import RunEnvironment, Verification, below, verify
from core.evidence.events import compact_events
from core.evidence.models import Excerpt, GateEvidence, JudgeInputs, RunEvidence
from core.evidence.redact import redact, redact_record, secret_values
from core.evidence.text import encodable
from core.files.changes import Snapshot, patch, snapshot, summarize_changes
from core.matrix import Matrix, ModelPrice, Rubric, Scenario, Verifier, load_rubric
from core.metrics import formulas
from core.metrics.interaction import interaction_metrics, target_commands
from core.metrics.limits import crossed, spend_of
from core.metrics.pricing import price_for
from core.metrics.process import process_metrics
from core.metrics.tokens import token_metrics
from core.results.run import GATES_FAILED, GateResult, RunResult, RunSpec, RunStatus
from core.results.transcript import AgentOutcome, CommandRecord, Transcript
from core.transcripts import parse_transcript, render_transcript
from core.transcripts.outage import outage_of

Phase = Callable[[str], None]
CAPTURE_CUT = (
    "stdout, stderr: the agent printed more than agent.max_transcript_bytes ({}); "
    "the middle was cut as it ran"
)
CHANGES_MISSING = "changes summary, patch: not built, the workspace could not be read: "


@dataclass(frozen=True)
class Evaluated:
    """A run's result and its evidence. The evidence is whole: the caller redacts
    and bounds it (core.evidence.caps) before it is stored."""

    result: RunResult
    evidence: RunEvidence


def evaluate_run(
    spec: RunSpec,
    matrix: Matrix,
    workspace: Path,
    outcome: AgentOutcome,
    *,
    events_text: str | None = None,
    session_text: str | None = None,
    env: Mapping[str, str] | None = None,
    environ: Mapping[str, str] = os.environ,
    on_phase: Phase = lambda phase: None,
    secrets: list[str] | None = None,
    prepared: Snapshot | None = None,
    enclosure: Enclosure | None = None,
    judgments: JudgmentCache | None = None,
    on_gated: Callable[[list[CommandRecord]], None] = lambda commands: None,
    task: RunEnvironment | None = None,
) -> Evaluated:
    """`session_text`: the record a preset's CLI keeps of its session (its requests,
    where stdout sums them). `secrets`: the values to redact, when the caller has them already
    (default: secret_values(matrix, environ)). `prepared`: the workspace as the
    agent found it, for the summary and the patch of what the agent changed.
    `enclosure`: where command gates run (the agent's container). `judgments`:
    the judgment cache; `on_gated`, once the gates ran, the target commands their
    transcript gates read (kept for rescore). `task`: where a benchmark task's
    verifier runs (core.evaluation.verifier), before the gates."""
    tier = matrix.tier(spec.tier)
    agent = matrix.agent_for(tier)
    scenario = matrix.scenario(spec.scenario)
    if secrets is None:
        secrets = secret_values(matrix, environ)
    outcome, events_text = _encodable(outcome, events_text)

    transcript = parse_transcript(
        agent.transcript,
        outcome.stdout,
        events_text,
        scenario.target.command_pattern,
        session_text=session_text,
        stderr=outcome.stderr,
    )
    commands = target_commands(transcript, scenario.target)
    interaction = interaction_metrics(transcript, scenario.target, completed=outcome.completed)
    model = agent.model or transcript.model
    price = price_for(model, matrix.pricing)
    limit = outcome.limit or crossed(matrix.limits_for(tier, scenario), spend_of(transcript, price))
    not_started = _not_started(outcome, transcript, secrets)
    outage = transcript.outage or outage_of(outcome.error)
    if outage is not None:
        not_started = f"model provider outage: {redact(outage, secrets)}"

    # An agent that never ran (or whose model provider was away) has nothing to
    # check or judge: its run is an infrastructure error, and gates that happen
    # to pass must not look like its work.
    gates: list[GateResult] = []
    gate_evidence: list[GateEvidence] = []
    judge = None
    judge_evidence = None
    changes, changed = "", ""
    missing: list[str] = []
    verification = None
    if not_started is None and scenario.verifier is not None:
        verification = _verified(scenario.verifier, task, on_phase)
        if verification.error is not None:
            not_started = verification.error
    if not_started is None:
        on_phase("gates")
        runs = gate_runs(
            scenario.evaluation.gates,
            workspace,
            target_commands=commands,
            env=env,
            enclosure=enclosure,
        )
        # The judge's prompt shows them.
        gates = [redact_record(run.result, secrets) for run in runs]
        gate_evidence = [run.evidence for run in runs]
        on_gated(commands)
        try:
            after = snapshot(workspace)
            changes = summarize_changes(workspace, prepared, after=after)
            changed = patch(prepared, after, max_chars=int(matrix.evidence.max_run_kb * 1024))
        except Exception as exc:  # evidence only: the agent's outcome stands without it
            missing.append(f"{CHANGES_MISSING}{exc!r}")
        if scenario.evaluation.judge_enabled:
            on_phase("judge")
            inputs = judge_inputs(matrix, scenario, outcome, transcript, changes, secrets)
            judge, judge_evidence = judge_with(
                matrix, scenario, inputs, gates, environ, judgments, secrets=secrets
            )

    result = RunResult(
        experiment_id=spec.experiment_id,
        run_id=spec.run_id,
        tier=spec.tier,
        scenario=spec.scenario,
        run_index=spec.run_index,
        status=_status(outcome, transcript, limit),
        limit=limit,
        model=model,
        started_at=outcome.started_at,
        ended_at=outcome.ended_at,
        duration_seconds=max(outcome.ended_at - outcome.started_at, 0.0),
        exit_code=outcome.exit_code,
        interaction=interaction,
        gates=gates,
        gates_passed=sum(g.passed for g in gates),
        gates_total=len(gates),
        judge=judge,
        transcript_format=transcript.format,
        transcript_malformed_lines=transcript.malformed_lines
        + transcript.events_file_malformed_lines,
        transcript_truncated=outcome.output_truncated,
        transcript_unfinished=not transcript.finished,
        transcript_unrecognised=not_started is None and _wrong_format(outcome, transcript),
    )
    result = _with_tokens_and_cost(result, transcript, price, model)
    if verification is not None:
        result.rewards = verification.rewards
    verdict = [verification.failure] if verification is not None and verification.failure else []
    result = _with_outcome(result, matrix, scenario, outcome, transcript, secrets, verdict)
    if not_started is not None:
        # Nothing gated, nothing judged: no credit either (an empty gate list's rates
        # would read as all of it).
        result = result.model_copy(
            update={
                "status": RunStatus.infra_error,
                "passed": False,
                "pass_rate": 0.0,
                "impl_rate": 0.0,
                "composite_score": 0.0,
                "layered_composite": None,
                "cost_of_pass": None,
                "fail_reason": not_started,
                "outage": outage is not None,
                "retry_after_s": transcript.retry_after_s if outage is not None else None,
            }
        )
    if scenario.process is not None:
        result.process = process_metrics(transcript.commands, scenario.process)
    result.tokens = token_metrics(transcript.components, price)
    evidence = RunEvidence(
        experiment_id=spec.experiment_id,
        run_id=spec.run_id,
        stdout=Excerpt.whole(outcome.stdout),
        stderr=Excerpt.whole(outcome.stderr),
        transcript=Excerpt.whole(events_text or ""),
        events=compact_events(transcript),
        gates=gate_evidence,
        verifier=verification.evidence if verification is not None else None,
        judge=judge_evidence,
        changes_summary=changes,
        patch=Excerpt.whole(changed),
        cuts=[
            *([CAPTURE_CUT.format(agent.max_transcript_bytes)] if outcome.output_truncated else []),
            *missing,
        ],
    )
    return Evaluated(result, evidence)


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
    matrix: Matrix,
    scenario: Scenario,
    outcome: AgentOutcome,
    transcript: Transcript,
    changes: str,
    secrets: Sequence[str],
) -> JudgeInputs:
    """What the judge is shown of a run, redacted: kept as evidence, so that rejudge
    shows a judge the same without the agent."""
    assert matrix.judge is not None  # validated at load: a judged scenario has a judge
    text = redact(
        render_transcript(transcript, outcome.stdout, matrix.judge.max_transcript_chars), secrets
    )
    return JudgeInputs(
        task_prompt=scenario.prompt_text(),
        transcript_text=Excerpt.whole(text),
        changes_summary=redact(changes, secrets),
    )


def judge_with(
    matrix: Matrix,
    scenario: Scenario,
    inputs: JudgeInputs,
    gates: Sequence[GateResult],
    environ: Mapping[str, str],
    judgments: JudgmentCache | None,
    rubric: Rubric | None = None,
    secrets: Sequence[str] = (),
) -> Judgment:
    """The matrix's judge on `inputs`: at a run's end, and again at a rejudge (which
    may bring its own `rubric`, else the scenario's)."""
    config = matrix.judge
    scenario_judge = scenario.evaluation.judge
    assert config is not None and scenario_judge is not None  # validated at load
    api_key = environ.get(config.api_key_env) if config.api_key_env else None
    return judge_run(
        config,
        scenario_judge,
        rubric or load_rubric(scenario_judge.rubric),
        inputs,
        gates=gates,
        api_key=api_key,
        price=price_for(config.model, matrix.pricing),
        cache=judgments,
        secrets=secrets,
    )


def _with_tokens_and_cost(
    result: RunResult, transcript: Transcript, price: ModelPrice | None, model: str | None
) -> RunResult:
    calls = transcript.llm_calls  # with cumulative_input: parse_transcript set it
    spend = spend_of(transcript, price)
    unknown = None
    if spend.cost_usd is None:
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


def _with_outcome(
    result: RunResult,
    matrix: Matrix,
    scenario: Scenario,
    outcome: AgentOutcome,
    transcript: Transcript,
    secrets: Sequence[str],
    verdict: Sequence[str],
) -> RunResult:
    reasons = [*_agent_reasons(result, outcome, transcript, secrets), *verdict]
    return scored(result, matrix, scenario, reasons)


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
        # The judge never answered: no verdict exists, so this is not a result.
        update["status"] = RunStatus.infra_error
        reasons.insert(0, f"{JUDGE_ERROR}{judge.error}")
    update["fail_reason"] = "; ".join(reasons) if reasons and not passed else None
    return result.model_copy(update=update)


# How the fail reasons of the judge begin (rejudge tells them, and the gates' by
# core/results.GATES_FAILED and the rewards' by verifier.REWARD_BELOW, from the
# agent's own by these).
JUDGE_ERROR = "judge error: "
JUDGE_SCORE = "judge score "


def _agent_reasons(
    result: RunResult, outcome: AgentOutcome, transcript: Transcript, secrets: Sequence[str]
) -> list[str]:
    reasons: list[str] = []
    if outcome.timed_out:
        reasons.append("agent timed out")
    elif outcome.error:
        reasons.append(f"agent could not run: {outcome.error}")
    elif outcome.stopped:
        reasons.append(f"agent stopped: {outcome.stopped}")
    elif outcome.exit_code not in (0, None):
        # The error the agent reported says why in its own words (said below); stderr's
        # tail would be noise before it (OpenCode's: a stack trace), and is evidence.
        tail = "" if transcript.agent_reported_error else outcome.stderr.strip()[-300:]
        reasons.append(
            f"agent exited with code {outcome.exit_code}"
            + (f": {redact(tail, secrets)}" if tail else "")
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
