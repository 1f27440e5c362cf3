"""core.results.transcript: how an agent process ended, and what counts as completing."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from core.results.transcript import AgentOutcome, LLMCallMetrics


@pytest.mark.parametrize(
    ("ending", "completed"),
    [
        ({"exit_code": 0}, True),
        ({"exit_code": 1}, False),
        ({"exit_code": None}, False),
        ({"exit_code": 0, "timed_out": True}, False),
        ({"exit_code": 0, "error": "not found"}, False),
        ({"exit_code": 0, "stopped": "workspace over 100 MB"}, False),
    ],
)
def test_only_an_agent_that_exited_0_by_itself_completed(
    ending: dict[str, object], completed: bool
) -> None:
    assert AgentOutcome.model_validate({**ending, "started_at": 0, "ended_at": 1}).completed is (
        completed
    )


def test_a_call_cannot_count_negative_tokens() -> None:
    with pytest.raises(ValidationError):
        LLMCallMetrics(input_tokens=-1, output_tokens=0)
    assert LLMCallMetrics(input_tokens=1, output_tokens=2).cumulative_input == 0
