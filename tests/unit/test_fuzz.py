"""Hypothesis fuzzing of everything evalfleet reads from users, agents and judges.

Matrix files, rubric files, events.jsonl lines (and the other transcript
formats) and judge answers: whatever the input, the outcome is a value or the
documented clean error (ConfigError, AnswerError), never a traceback.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import AnswerError, ConfigError
from core.evaluation.judge import parse_answer
from core.matrix import AgentConfig, Matrix, Rubric, load_matrix, load_rubric
from core.results.run import JudgeResponse
from core.results.transcript import Transcript
from core.transcripts import FORMATS, parse_transcript

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# JSON-like values, biased towards the shapes and edge values configs are made of.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["", "T0", "../x", "/etc/passwd", "events-jsonl", "bwrap", "len >= 3", "$"]),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)


def _with_random_fields(base: dict[str, Any], keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """`base` with some of its known keys replaced, or unknown keys added, by fuzz."""
    return st.builds(
        lambda changes: {**base, **changes},
        st.dictionaries(st.sampled_from(keys) | st.text(max_size=10), values, max_size=4),
    )


MATRIX_KEYS = list(Matrix.model_fields)
VALID_MATRIX: dict[str, Any] = {
    "name": "fuzz",
    "agent": {"command": "true"},
    "tiers": [{"id": "T0"}],
    "scenarios": [{"id": "s", "prompt": "go", "evaluation": {"gates": [
        {"type": "command_json_path", "command": "x", "path": "$", "assertion": "len >= 3"}
    ]}}],
}  # fmt: skip


# Every example's file in a folder of its own, all under one folder that goes when the
# test process ends (a folder a file left in /tmp added up to thousands a day).
_FOLDER = tempfile.TemporaryDirectory(prefix="evalfleet-fuzz-")


def _write(text: str | bytes) -> Path:
    folder = Path(tempfile.mkdtemp(dir=_FOLDER.name))
    path = folder / "file.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _loads_or_refuses_cleanly(path: Path) -> None:
    try:
        assert isinstance(load_matrix(path), Matrix)
    except ConfigError as exc:
        assert exc.problems and all(str(path) in str(p) for p in exc.problems)


@FUZZ
@given(st.text(max_size=400) | st.binary(max_size=200))
def test_any_matrix_file_text_loads_or_is_a_clean_config_error(text: str | bytes) -> None:
    _loads_or_refuses_cleanly(_write(text))


@FUZZ
@given(_with_random_fields(VALID_MATRIX, MATRIX_KEYS))
def test_any_matrix_document_loads_or_is_a_clean_config_error(document: dict[str, Any]) -> None:
    _loads_or_refuses_cleanly(_write(yaml.safe_dump(document, allow_unicode=True)))


@FUZZ
@given(
    st.lists(_with_random_fields({"id": "T0"}, ["id", "files", "agent", "queue"]), max_size=3),
    _with_random_fields({"command": "true"}, list(AgentConfig.model_fields)),
)
def test_any_tiers_and_agent_load_or_are_a_clean_config_error(
    tiers: list[dict[str, Any]], agent: dict[str, Any]
) -> None:
    document = {**VALID_MATRIX, "tiers": tiers, "agent": agent}
    _loads_or_refuses_cleanly(_write(yaml.safe_dump(document, allow_unicode=True)))


def test_a_path_of_a_user_this_machine_lacks_is_a_clean_config_error() -> None:
    """Found by the test above: `~0` is user 0's home, and pathlib raises RuntimeError."""
    document = {**VALID_MATRIX, "tiers": [{"id": "T0", "files": {"notes.md": "~0/notes.md"}}]}
    path = _write(yaml.safe_dump(document))
    with pytest.raises(ConfigError, match="no user '0' on this machine"):
        load_matrix(path)


def test_deeply_nested_yaml_is_a_clean_config_error() -> None:
    _loads_or_refuses_cleanly(_write("name: " + "[" * 5000 + "]" * 5000))


@FUZZ
@given(
    st.one_of(
        st.text(max_size=300),
        _with_random_fields({"criteria": [{"id": "q", "weight": 1, "description": "d"}]},
                            ["criteria", "output"]).map(yaml.safe_dump),
        st.lists(_with_random_fields({"id": "q", "weight": 1, "description": "d"},
                                     ["id", "weight", "description"]), max_size=3)
        .map(lambda criteria: yaml.safe_dump({"criteria": criteria})),
    )
)  # fmt: skip
def test_any_rubric_file_loads_or_is_a_clean_config_error(text: str) -> None:
    path = _write(text)
    try:
        assert isinstance(load_rubric(path), Rubric)
    except ConfigError as exc:
        assert exc.problems and all(str(path) in str(p) for p in exc.problems)


EVENT_TYPES = ["llm_call", "tool_call", "tool_result", "component", "message", "other"]
EVENT_FIELDS = ["type", "input_tokens", "output_tokens", "cache_read_tokens", "latency_ms",
                "tool_calls", "model", "id", "command", "exit_code", "component", "tokens",
                "role", "text"]  # fmt: skip
events = st.builds(
    lambda kind, fields: json.dumps({"type": kind, **fields}),
    st.sampled_from(EVENT_TYPES) | values,
    st.dictionaries(st.sampled_from(EVENT_FIELDS), values, max_size=6),
)
lines = st.lists(events | st.text(max_size=60), max_size=12).map("\n".join)


@FUZZ
@given(lines)
def test_any_events_jsonl_parses_counting_what_it_cannot_use(text: str) -> None:
    transcript = parse_transcript("events-jsonl", "", text)
    assert isinstance(transcript, Transcript)
    usable = len(transcript.llm_calls) + len(transcript.commands) + len(transcript.components)
    assert usable + len(transcript.messages) <= len(text.splitlines())
    assert all(c.input_tokens >= 0 and c.output_tokens >= 0 for c in transcript.llm_calls)


@FUZZ
@given(st.sampled_from(FORMATS.names()), lines, st.none() | lines)
def test_any_agent_output_in_any_format_parses(
    fmt: str, output: str, events_text: str | None
) -> None:
    assert isinstance(parse_transcript(fmt, output, events_text, r"my-tool\s+(\S+)"), Transcript)


RUBRIC = Rubric.model_validate(
    {"criteria": [{"id": "a", "weight": 2, "description": "a"},
                  {"id": "b", "weight": 1, "description": "b"}]}
)  # fmt: skip
answers = _with_random_fields(
    {"scores": {"a": 0.5, "b": 1.0}, "weighted_score": 0.6, "confidence": 0.5,
     "issues": [], "highlights": []},
    ["scores", "weighted_score", "confidence", "issues", "highlights"],
)  # fmt: skip


@FUZZ
@given(
    st.one_of(
        st.text(max_size=200),
        answers.map(json.dumps),
        answers.map(lambda a: f"Here you go:\n```json\n{json.dumps(a)}\n```"),
        values.map(json.dumps),
    )
)
def test_any_judge_answer_is_a_response_or_an_answer_error(text: str) -> None:
    try:
        response = parse_answer(text, RUBRIC)
    except AnswerError as exc:
        assert str(exc)
        return
    assert isinstance(response, JudgeResponse)
    assert all(0.0 <= response.scores[c.id] <= 1.0 for c in RUBRIC.criteria)
