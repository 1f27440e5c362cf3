"""A judge API that misbehaves, end to end: a loopback server, real workers, the CLI.

One scenario per fault (the server answers by the task text in the judge's
prompt): a 429 storm, 500s, malformed bodies, malformed answers, scores that are
no numbers (`true`, `"1"`), a server that never answers, and one healthy
scenario. Every faulty run ends as a recorded infrastructure error with its
reason after bounded retries, and the experiment completes. Likewise a judge
that dribbles its answer or sends one without end, and a model under test that
does the latter.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from core.llm.client import MAX_RESPONSE_BYTES
from core.results.run import RunResult, RunStatus
from core.store import Store
from tests.conftest import StartWorker, run_cli
from tests.support.llm_stub import (
    LLMStub,
    RecordedRequest,
    Step,
    dribble,
    endless,
    malformed,
    reply,
    slow,
    status,
)

pytestmark = pytest.mark.integration

GOOD = {"scores": {"quality": 0.9}, "weighted_score": 0.9, "confidence": 0.8,
        "issues": [], "highlights": ["fine"]}  # fmt: skip

FAULTS: dict[str, Step] = {
    "storm": status(429, {"Retry-After": "0"}),
    "crash": status(500),
    "garbled": malformed("<html>bad gateway</html>"),
    "nonsense": reply(content="I think it went well, 8/10."),
    "silent": slow(60),
    # Scores that are no numbers: lax parsing read both as 1.0 and passed the run.
    "boolean": reply(content=json.dumps({**GOOD, "scores": {"quality": True}})),
    "string": reply(content=json.dumps({**GOOD, "scores": {"quality": "1"}})),
    "healthy": reply(content=json.dumps(GOOD)),
}


def _by_scenario(request: RecordedRequest) -> Step:
    prompt = json.dumps(request.body)
    return next(step for name, step in FAULTS.items() if f"task:{name}" in prompt)


def test_judge_faults_are_bounded_recorded_and_the_experiment_completes(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    (tmp_path / "rubric.yaml").write_text(
        "criteria: [{id: quality, weight: 1, description: the work is good}]\n"
    )
    scenarios = "\n".join(
        f"  - {{id: {name}, prompt: 'task:{name}', evaluation: {{judge: {{rubric: rubric.yaml}}}}}}"
        for name in FAULTS
    )
    with LLMStub([_by_scenario]) as stub:
        matrix = tmp_path / "matrix.yaml"
        matrix.write_text(f"""
name: judge-faults
runs_per_tier: 1
agent: {{kind: command, command: "echo did it", timeout_s: 30}}
tiers: [{{id: T0}}]
judge: {{base_url: "{stub.base_url}", model: judge-model, api_key_env: null,
         timeout_s: 1, connect_timeout_s: 1, max_attempts: 2}}
scenarios:
{scenarios}
""")
        start_worker(concurrency=3)
        started = time.monotonic()
        result = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env, timeout=180)
        elapsed = time.monotonic() - started
    assert result.returncode == 3, result.stderr  # its runs were infrastructure errors
    report = json.loads(result.stdout)
    exp_id = report["experiment"]["id"]
    runs = {r.scenario: r for r in store.results.all(exp_id.strip())}

    expected = {
        "storm": "judge error: HTTP 429 after 2 attempts",
        "crash": "judge error: HTTP 500 after 2 attempts",
        "garbled": "judge error: malformed answer after 2 attempts: response body is not JSON",
        "nonsense": "judge error: malformed answer after 2 attempts: answer is not valid JSON",
        "silent": "judge error: read timeout after 2 attempts",
        "boolean": "judge error: malformed answer after 2 attempts: "
        "scores.quality: Input should be a valid number, got true",
        "string": "judge error: malformed answer after 2 attempts: "
        'scores.quality: Input should be a valid number, got "1"',
    }
    for scenario, reason in expected.items():
        run = runs[scenario]
        assert run.status == RunStatus.infra_error and not run.passed, scenario
        assert (run.fail_reason or "").startswith(reason), (scenario, run.fail_reason)
        assert run.judge is not None and 1 <= run.judge.attempts <= 4  # at most N*N requests
    assert runs["healthy"].passed and runs["healthy"].judge is not None
    assert runs["healthy"].judge.weighted_score == pytest.approx(0.9)
    assert report["experiment"]["status"] == "complete"
    assert report["tiers"]["T0"]["errors"] == 7 and report["tiers"]["T0"]["passes"] == 1
    assert elapsed < 90  # bounded: no fault holds a run for long


STREAMS: dict[str, Step] = {
    "dribbling": dribble(reply(content=json.dumps(GOOD)), interval_s=2.0),
    "endless": endless(),
    "answered": reply(content=json.dumps({**GOOD, "scores": {"quality": 0.2}})),
}


def test_a_dribbling_or_endless_llm_is_stopped_and_recorded_well_before_the_soft_limit(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    (tmp_path / "rubric.yaml").write_text(
        "criteria: [{id: quality, weight: 1, description: the work is good}]\n"
    )
    scenarios = "\n".join(
        f"  - {{id: {name}, prompt: 'task:{name}', evaluation: {{judge: {{rubric: rubric.yaml}}}}}}"
        for name in STREAMS
    )

    def by_scenario(request: RecordedRequest) -> Step:
        prompt = json.dumps(request.body)
        return next(step for name, step in STREAMS.items() if f"task:{name}" in prompt)

    with LLMStub([by_scenario]) as judge, LLMStub([endless()]) as model:
        matrix = tmp_path / "matrix.yaml"
        matrix.write_text(f"""
name: llm-streams
runs_per_tier: 1
agent: {{kind: command, command: "echo did it", timeout_s: 30}}
tiers:
  - {{id: T0}}
  - {{id: LLM, agent: {{kind: openai, base_url: "{model.base_url}", model: m, timeout_s: 30}}}}
judge: {{base_url: "{judge.base_url}", model: judge-model, api_key_env: null,
         timeout_s: 10, max_attempts: 2, deadline_s: 4}}
scenarios:
{scenarios}
""")
        start_worker(concurrency=3)
        result = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env, timeout=180)
    assert result.returncode == 3, result.stderr  # the judge's faults are infrastructure errors
    exp_id = json.loads(result.stdout)["experiment"]["id"]
    runs = {(r.tier, r.scenario): r for r in store.results.all(exp_id)}

    deadline = "judge error: no complete response within the 4 s deadline: the body was still"
    cap = f"judge error: response body over the {MAX_RESPONSE_BYTES}-byte limit"
    dribbled, flooded = runs[("T0", "dribbling")], runs[("T0", "endless")]
    assert dribbled.status == flooded.status == RunStatus.infra_error
    assert (dribbled.fail_reason or "").startswith(deadline), dribbled.fail_reason
    assert (flooded.fail_reason or "").startswith(cap), flooded.fail_reason
    # The judge's deadline ended it, not the Celery soft limit (30 s agent + 4 s judge + ...).
    assert dribbled.duration_seconds < 4 + 10
    answered = runs[("T0", "answered")]
    assert answered.status == RunStatus.completed and answered.judge is not None
    assert answered.judge.weighted_score == pytest.approx(0.2)
    # The provider of the model under test flooding its answer is an outage on the
    # agent's side, not the agent's failure: an infrastructure error with the reason,
    # and nothing is judged.
    for scenario in ("answered", "dribbling", "endless"):
        flooded_agent = runs[("LLM", scenario)]
        assert flooded_agent.status == RunStatus.infra_error and flooded_agent.judge is None
        assert (flooded_agent.fail_reason or "").startswith(
            f"agent could not run: LLM call to {model.base_url}/chat/completions failed: "
            f"response body over the {MAX_RESPONSE_BYTES}-byte limit"
        ), flooded_agent.fail_reason


def test_a_judge_outage_fails_runs_their_gates_failed_and_names_rejudge_for_the_rest(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """A run whose gates failed could not have passed whatever its judge said: it is
    counted as failed (its score missing, the judge's error kept), not an infrastructure
    error out of N, which pushed pass rates up. A run whose gates passed is one, and the
    hint names rejudge, which restores it with no agent run again; resume --retry-errors
    leaves it to rejudge rather than pay for its agent twice."""
    judge = {"up": False}

    def outage(request: RecordedRequest) -> Step:
        return reply(content=json.dumps(GOOD)) if judge["up"] else status(500)

    with LLMStub([outage]) as stub:
        matrix = _judged(tmp_path, stub.base_url, "judge-down", 1, gated="missing.txt")
        start_worker(concurrency=2)
        result = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env, timeout=180)
        assert result.returncode == 3, result.stderr
        report = json.loads(result.stdout)
        exp_id = report["experiment"]["id"]
        runs = {r.scenario: r for r in store.results.all(exp_id)}
        gated, clean = runs["gated"], runs["clean"]
        assert (gated.status, gated.passed) == (RunStatus.completed, False)
        assert gated.judge is not None and gated.judge.weighted_score is None
        down = "HTTP 500 after 1 attempt: " + json.dumps({"error": {"message": "stub status 500"}})
        assert gated.judge.error == down
        assert gated.fail_reason == f"gates failed: file_exists; judge error: {down}"
        # No judge score: impl rate is the gates' share (docs: without a judge).
        assert (gated.impl_rate, gated.composite_score, gated.layered_composite) == (0, 0, None)
        assert clean.status == RunStatus.infra_error and not clean.passed
        assert clean.fail_reason == f"judge error: {down}"
        tier = report["tiers"]["T0"]
        assert (tier["counted"], tier["passes"], tier["errors"]) == (1, 0, 1)
        said = " ".join(result.stderr.split())
        assert "--retry-errors" not in said
        assert said.endswith(
            "1 of 2 runs was an infrastructure error, kept out of the statistics; most common "
            f"(1): judge error: {down} its agent and gates ran but the "
            f"judge failed: once it answers, `scheduler rejudge {exp_id}` judges it again from "
            "what the judge was shown, without starting any agent"
        ), said
        deliveries = {r.run_id: len(store.attempts.of(exp_id, r.run_id)) for r in runs.values()}

        # resume --retry-errors runs no agent of a run whose judge alone failed.
        resumed = run_cli("resume", exp_id, "--retry-errors", env=fleet_env)
        assert resumed.returncode == 0, resumed.stderr
        assert (
            f"nothing to resume; 1 run whose judge failed: `scheduler rejudge {exp_id}` judges "
            "them again without starting any agent"
        ) in " ".join(resumed.stderr.split())

        judge["up"] = True
        rejudged = run_cli("rejudge", exp_id, "--wait", "--format", "json", env=fleet_env)
        assert rejudged.returncode == 0, rejudged.stderr
    shown = run_cli("report", exp_id, "--version", "2", "--format", "json", "--runs",
                    env=fleet_env)  # fmt: skip
    after = {
        r.scenario: r
        for r in (RunResult.model_validate(run) for run in json.loads(shown.stdout)["runs"])
    }
    assert (after["clean"].status, after["clean"].passed) == (RunStatus.completed, True)
    assert after["gated"].status == RunStatus.completed and not after["gated"].passed
    assert after["gated"].judge is not None
    assert after["gated"].judge.weighted_score == pytest.approx(0.9)
    assert after["gated"].fail_reason == "gates failed: file_exists"
    tier = json.loads(rejudged.stdout)["tiers"]["T0"]
    assert (tier["counted"], tier["passes"], tier["errors"]) == (2, 1, 0)
    # Neither rejudge nor resume started an agent.
    assert {r.run_id: len(store.attempts.of(exp_id, r.run_id)) for r in runs.values()} == (
        deliveries
    )


@pytest.mark.integration
def test_runs_fail_fast_kept_from_a_judge_that_was_down_are_resumed_not_rejudged(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """A judge down from the start stops its tier after three judge errors (fail-fast):
    the runs it kept from starting have a judge error for their reason but no agent
    run, so rejudge has nothing to judge. They are resume's: the hint says so, resume
    --retry-errors sends them (not the judged ones, left to rejudge), and they pass."""
    judge = {"up": False}

    def outage(request: RecordedRequest) -> Step:
        return reply(content=json.dumps(GOOD)) if judge["up"] else status(500)

    with LLMStub([outage]) as stub:
        matrix = _judged(tmp_path, stub.base_url, "judge-down-early", 5)
        start_worker(concurrency=1)
        result = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env, timeout=180)
        assert result.returncode == 3, result.stderr
        report = json.loads(result.stdout)
        exp_id = report["experiment"]["id"]
        runs = store.results.all(exp_id)
        kept = [r for r in runs if r.fail_reason and "(not run:" in r.fail_reason]
        judged = [r for r in runs if r not in kept]
        assert len(judged) == 3 and len(kept) == 2
        assert all(r.gates == [] and r.judge is None for r in kept)  # no agent ran
        assert (report["judge_errors"], report["experiment"]["errors"]) == (3, 5)
        said = " ".join(result.stderr.split())
        assert (
            f"first for the 2 runs whose agent could not be run, `scheduler resume {exp_id} "
            "--retry-errors` runs them again"
        ) in said, said
        assert f"then for the 3 runs whose judge failed, `scheduler rejudge {exp_id}`" in said

        # A rejudge while the judge is still down says that it answered none.
        down = run_cli("rejudge", exp_id, "--wait", env=fleet_env)
        assert down.returncode == 3, down.stderr
        assert "3 judgments, 0 from cache, 3 not answered" in down.stderr, down.stderr

        judge["up"] = True
        resumed = run_cli("resume", exp_id, "--retry-errors", "--wait", env=fleet_env)
        assert resumed.returncode == 3, resumed.stderr  # the judged three wait for rejudge
    after = {r.run_id: r for r in store.results.all(exp_id)}
    assert all(after[r.run_id].passed for r in kept)
    assert all(after[r.run_id].status is RunStatus.infra_error for r in judged)


def _judged(folder: Path, base_url: str, name: str, runs: int, gated: str | None = None) -> Path:
    """A matrix whose agent writes out.txt and whose judge is `base_url`, asked once:
    scenario `clean` gated on out.txt, and with `gated`, one gated on that file, which
    the agent never writes."""
    (folder / "rubric.yaml").write_text(
        "criteria: [{id: quality, weight: 1, description: the work is good}]\n"
    )
    scenarios = [("gated", gated)] if gated else []
    scenarios.append(("clean", "out.txt"))
    listed = "".join(
        f"""
  - id: {scenario}
    prompt: write {path}
    evaluation:
      gates: [{{type: file_exists, path: {path}}}]
      judge: {{rubric: rubric.yaml}}"""
        for scenario, path in scenarios
    )
    matrix = folder / "matrix.yaml"
    matrix.write_text(f"""
name: {name}
runs_per_tier: {runs}
agent: {{kind: command, command: "echo did it > out.txt", timeout_s: 30}}
tiers: [{{id: T0}}]
judge: {{base_url: "{base_url}", model: judge-model, api_key_env: null,
         timeout_s: 5, max_attempts: 1}}
scenarios:{listed}
""")
    return matrix
