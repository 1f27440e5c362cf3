"""Judge repeats, per-criterion reasons and the judgment cache: the judge client
against the loopback stub, its cache in the real Redis."""

from __future__ import annotations

import json
import statistics
import uuid
from pathlib import Path
from typing import Any

import pytest

from core.evaluation.judge import Judge, Judgment, judge_run
from core.evidence.models import Excerpt, JudgeInputs
from core.matrix import JudgeConfig, Rubric, ScenarioJudge, load_rubric
from core.store import Store
from core.store.judgments import Judgments
from tests.support.llm_stub import LLMStub, reply, scripted_judge

# Unique per session: the judgment cache outlives a test (it is shared under the prefix).
MARKER = f"run={uuid.uuid4().hex[:8]}/0;"
OTHER = MARKER.replace("/0;", "/1;")


@pytest.fixture
def scenario(tmp_path: Path) -> ScenarioJudge:
    path = tmp_path / "rubric.yaml"
    path.write_text("criteria: [{id: quality, weight: 1, description: does the job}]\n")
    return ScenarioJudge(rubric=path, pass_threshold=0.7)


@pytest.fixture
def rubric(scenario: ScenarioJudge) -> Rubric:
    return load_rubric(scenario.rubric)


def judged(
    stub: LLMStub,
    scenario: ScenarioJudge,
    rubric: Rubric,
    cache: Judgments | None = None,
    transcript: str = f"$ my-tool create\n{MARKER}\n",
    **config: Any,
) -> Judgment:
    settings: dict[str, Any] = {"base_url": stub.base_url, "api_key_env": None, **config}
    judge = JudgeConfig(model=settings.pop("model", "judge-mini"), **settings)
    return judge_run(
        Judge(judge, scenario, rubric, api_key=None, cache=cache),
        JudgeInputs(task_prompt="Create a note.", transcript_text=Excerpt.whole(transcript)),
        gates=[],
    )


def test_reasons_are_asked_for_and_kept_per_criterion(
    scenario: ScenarioJudge, rubric: Rubric
) -> None:
    with LLMStub([scripted_judge({MARKER: [0.8]})]) as stub:
        result, evidence = judged(stub, scenario, rubric)
    prompt = stub.requests[0].body["messages"][-1]["content"]
    assert '"reasons": {"quality": <one short sentence: why this score>}' in prompt
    assert result.response is not None and result.response.reasons == {"quality": "scripted 0.8"}
    [call] = evidence.calls
    assert call.reasons == {"quality": "scripted 0.8"} and call.scores == {"quality": 0.8}
    assert call.raw_answer is not None and '"reasons"' in call.raw_answer.text
    assert call.prompt.text == prompt and not call.cached
    assert evidence.inputs.task_prompt == "Create a note."


def test_an_answer_without_reasons_is_still_accepted(
    scenario: ScenarioJudge, rubric: Rubric
) -> None:
    old = {"scores": {"quality": 0.9}, "weighted_score": 0.9, "confidence": 1.0,
           "issues": [], "highlights": []}  # fmt: skip
    with LLMStub([reply(content=json.dumps(old))]) as stub:
        result, evidence = judged(stub, scenario, rubric)
    assert result.error is None and result.weighted_score == 0.9
    assert evidence.calls[0].reasons == {}


def test_repeats_score_the_mean_and_keep_the_spread(
    scenario: ScenarioJudge, rubric: Rubric
) -> None:
    with LLMStub([scripted_judge({MARKER: [0.5, 0.9, 0.7]})]) as stub:
        result, evidence = judged(stub, scenario, rubric, repeats=3)
    assert len(stub.requests) == 3
    assert result.scores == pytest.approx([0.5, 0.9, 0.7])
    assert result.weighted_score == pytest.approx(0.7)
    assert result.scores_sd == pytest.approx(0.2)  # sqrt(((-0.2)^2 + 0.2^2 + 0) / 2)
    assert result.passed and result.repeats == 3 and result.attempts == 3
    assert result.input_tokens == 30  # the stub's 10 prompt tokens per request
    assert [c.weighted_score for c in evidence.calls] == pytest.approx([0.5, 0.9, 0.7])


def test_one_failed_repeat_makes_the_judging_an_error(
    scenario: ScenarioJudge, rubric: Rubric
) -> None:
    with LLMStub([scripted_judge({MARKER: [0.8]}), reply(content="no JSON")]) as stub:
        result, evidence = judged(stub, scenario, rubric, repeats=2, max_attempts=1)
    assert result.error is not None and result.error.startswith("judgment 2 of 2: ")
    assert result.weighted_score is None and not result.passed
    assert evidence.calls[1].error is not None and evidence.calls[0].error is None


def test_the_same_question_twice_is_answered_from_the_cache(
    scenario: ScenarioJudge, rubric: Rubric, store: Store
) -> None:
    with LLMStub([scripted_judge({MARKER: [0.4, 0.8], OTHER: [0.6]})]) as stub:
        first, _ = judged(stub, scenario, rubric, store.judgments, repeats=2)
        assert len(stub.requests) == 2 and first.cached == 0
        again, evidence = judged(stub, scenario, rubric, store.judgments, repeats=2)
        # Same transcript, rubric, judge and repeat index: no request, and it says so.
        assert len(stub.requests) == 2
        assert again.cached == 2 and [c.cached for c in evidence.calls] == [True, True]
        assert again.scores == pytest.approx([0.4, 0.8]) and again.cost_usd in (None, 0.0)
        assert (again.input_tokens, again.attempts) == (0, 0)
        # A third repeat was never asked: only it is a request.
        more, _ = judged(stub, scenario, rubric, store.judgments, repeats=3)
        assert len(stub.requests) == 3 and more.cached == 2
        assert more.scores == pytest.approx([0.4, 0.8, 0.8])
        # Another judge model, or another transcript, is another question.
        judged(stub, scenario, rubric, store.judgments, model="judge-other")
        judged(stub, scenario, rubric, store.judgments, transcript=OTHER)
        assert len(stub.requests) == 5
    # The same model name at another endpoint is another judge.
    with LLMStub([scripted_judge({MARKER: [0.5, 0.5]})]) as elsewhere:
        moved, _ = judged(elsewhere, scenario, rubric, store.judgments, repeats=2)
        assert len(elsewhere.requests) == 2 and moved.cached == 0


def test_repeats_are_not_collapsed_by_the_cache(
    scenario: ScenarioJudge, rubric: Rubric, store: Store
) -> None:
    marker = f"run={uuid.uuid4().hex[:8]}/0;"
    with LLMStub([scripted_judge({marker: [0.2, 0.6, 1.0]})]) as stub:
        result, _ = judged(stub, scenario, rubric, store.judgments, marker, repeats=3)
    assert len(stub.requests) == 3 and result.cached == 0
    assert result.scores == pytest.approx([0.2, 0.6, 1.0])
    assert result.scores_sd == pytest.approx(statistics.stdev([0.2, 0.6, 1.0]))
