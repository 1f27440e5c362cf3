"""Transcript parsers against real agent-CLI captures (tests/fixtures/transcripts/SOURCES.md)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

import pytest

from core.matrix import ModelPrice
from core.metrics.limits import spend_of
from core.results.transcript import ComponentType, Transcript
from core.transcripts import FORMATS, parse_transcript, render_transcript
from core.transcripts.codex import unwrap_shell
from core.transcripts.compact import bound_text
from core.transcripts.jsonlines import read_json_lines
from tests.conftest import FIXTURES

TRANSCRIPTS = FIXTURES / "transcripts"


def fixture(name: str) -> str:
    return (TRANSCRIPTS / name).read_text(encoding="utf-8")


def parse(fmt: str, name: str, **kwargs: str) -> Transcript:
    return parse_transcript(fmt, fixture(name), **kwargs)


def token_sums(transcript: Transcript) -> tuple[int, int, int, int]:
    calls = transcript.llm_calls
    return (
        sum(call.input_tokens for call in calls),
        sum(call.cache_write_tokens for call in calls),
        sum(call.cache_read_tokens for call in calls),
        sum(call.output_tokens for call in calls),
    )


def commands(transcript: Transcript) -> list[tuple[str, int | None]]:
    return [(command.command, command.exit_code) for command in transcript.commands]


def assert_cumulative(transcript: Transcript) -> None:
    running = 0
    for call in transcript.llm_calls:
        running += call.input_tokens
        assert call.cumulative_input == running


# --- Claude Code -------------------------------------------------------------------------


def test_claude_1_single_call_with_result_totals() -> None:
    transcript = parse("claude-stream-json", "claude-stream-json-1.jsonl")
    assert len(transcript.llm_calls) == 1
    assert token_sums(transcript)[:3] == (10, 21570, 0)
    assert transcript.llm_calls[0].output_tokens == 5  # the per-line placeholder, kept
    assert transcript.reported_output_tokens == 25  # the authoritative total
    assert transcript.reported_cost_usd == 0.1354875
    assert transcript.reported_duration_ms == 2360
    assert transcript.finished and transcript.agent_reported_error is None
    assert transcript.model == "claude-opus-4-5-20251101"
    assert transcript.messages == ["assistant: 4"]
    assert transcript.commands == [] and transcript.malformed_lines == 0


def test_claude_2_dedupes_split_interleaved_lines_and_counts_subagents() -> None:
    transcript = parse("claude-stream-json", "claude-stream-json-2.jsonl")
    assert len(transcript.llm_calls) == 8
    assert token_sums(transcript) == (74, 20714, 126124, 15)
    assert all(call.model == "claude-haiku-4-5-20251001" for call in transcript.llm_calls)
    subagent = [m for m in transcript.messages if m.startswith("subagent: ")]
    assert len(subagent) == 1
    assert commands(transcript) == [
        ("sleep 15; echo bash-done", 0),
        ("sleep 20; echo agent-done", 0),
    ]
    # The main call at lines 4, 5 and 9 issued the Agent and the Bash tool calls.
    assert transcript.llm_calls[0].tool_calls_made == 2
    assert not transcript.finished
    assert transcript.reported_cost_usd is None and transcript.reported_duration_ms is None
    assert_cumulative(transcript)


def test_claude_background_bash_exit_comes_from_task_notification() -> None:
    stream = fixture("claude-stream-json-2.jsonl").replace(
        'completed (exit code 0)"', 'failed (exit code 7)"'
    )
    transcript = parse_transcript("claude-stream-json", stream)
    assert commands(transcript)[0] == ("sleep 15; echo bash-done", 7)


def test_claude_3_bash_paired_with_later_result() -> None:
    transcript = parse("claude-stream-json", "claude-stream-json-3.jsonl")
    assert len(transcript.llm_calls) == 1
    assert token_sums(transcript)[:3] == (10, 3556, 17254)
    assert transcript.llm_calls[0].tool_calls_made == 1
    assert commands(transcript) == [("ls -la", 0)]
    assert transcript.commands[0].id == "toolu_01BeipFBP3sUY3EAwVg3qQnE"
    assert transcript.reported_cost_usd == 0.24722425
    assert transcript.reported_output_tokens == 424
    # result.usage, not modelUsage (which also covers background models)
    assert transcript.reported_input_tokens == 18
    assert transcript.reported_cache_write_tokens == 25067
    assert transcript.reported_cache_read_tokens == 17254
    assert transcript.messages == ["result: Here are the files in the current directory."]


def test_claude_output_format_json_single_result_object() -> None:
    transcript = parse("claude-stream-json", "claude-json-1.json")
    assert transcript.finished
    assert transcript.reported_cost_usd == 0.24722425
    assert transcript.reported_duration_ms == 8722
    [aggregate] = transcript.llm_calls  # the session usage as one aggregate call
    assert (aggregate.input_tokens, aggregate.output_tokens) == (18, 424)
    assert (aggregate.cache_read_tokens, aggregate.cache_write_tokens) == (17254, 25067)


def test_claude_api_error_result_is_an_agent_error_even_with_subtype_success() -> None:
    transcript = parse("claude-stream-json", "claude-json-2.json")
    assert transcript.agent_reported_error == "API Error: 400 <provider message>"
    assert transcript.finished
    assert transcript.llm_calls == []  # zero usage: no aggregate call invented
    assert transcript.reported_cost_usd == 0


@pytest.mark.parametrize("indent", [None, 2])
def test_claude_output_format_json_as_array_of_messages(indent: int | None) -> None:
    messages = [json.loads(line) for line in fixture("claude-stream-json-3.jsonl").splitlines()]
    as_array = parse_transcript("claude-stream-json", json.dumps(messages, indent=indent))
    as_stream = parse("claude-stream-json", "claude-stream-json-3.jsonl")
    assert as_array == as_stream


def test_claude_exit_codes_dedupe_fallbacks_and_damaged_lines() -> None:
    transcript = parse("claude-stream-json", "claude-stream-json-errors.jsonl")
    assert commands(transcript) == [
        ("my-tool create x", 2),  # is_error + "Exit code 2"
        ("my-tool list", 1),  # is_error without a number; its line had a `Stdout: ` prefix
        ("my-tool create x --title y", 0),  # is_error absent
    ]
    calls = transcript.llm_calls
    assert len(calls) == 2  # msg_A (2 lines), req_C (2 lines, no message.id); not <synthetic>
    assert [(c.input_tokens, c.output_tokens, c.tool_calls_made) for c in calls] == [
        (12, 9, 2),  # copies disagreed on output_tokens (3, 9): the max is kept
        (30, 6, 2),
    ]
    assert [c.cumulative_input for c in calls] == [12, 42]
    assert transcript.agent_reported_error == "overloaded"
    assert transcript.malformed_lines == 2  # the stderr line and the truncated last line
    assert not transcript.finished
    assert transcript.messages == ["assistant: Retrying."]


# --- Codex -------------------------------------------------------------------------------


def test_codex_1_cached_input_is_a_subset_of_input() -> None:
    transcript = parse("codex-exec-json", "codex-exec-json-1.jsonl")
    [call] = transcript.llm_calls
    assert call.input_tokens + call.cache_read_tokens == 24763
    assert call.cache_read_tokens == 24448
    assert call.output_tokens == 122
    assert call.tool_calls_made == 1
    assert commands(transcript) == [("ls", 0)]
    assert transcript.finished and transcript.agent_reported_error is None


def test_codex_2_unwraps_quoted_command() -> None:
    transcript = parse("codex-exec-json", "codex-exec-json-2.jsonl")
    assert commands(transcript) == [("cat sample.txt", 0)]
    assert token_sums(transcript) == (6032 - 4992, 0, 4992, 114)


def test_codex_3_running_thread_totals_become_per_run_deltas() -> None:
    transcript = parse("codex-exec-json", "codex-exec-json-3.jsonl")
    calls = transcript.llm_calls
    assert [c.input_tokens + c.cache_read_tokens for c in calls] == [10656, 10672, 10689]
    assert [c.cache_read_tokens for c in calls] == [5888, 5888, 9984]
    assert [c.output_tokens for c in calls] == [6, 7, 8]
    assert_cumulative(transcript)
    assert transcript.messages == [
        "assistant: Hi!",
        "assistant: Hi again!",
        "assistant: Hi once more!",
    ]


def test_codex_failed_declined_and_turn_failure() -> None:
    transcript = parse("codex-exec-json", "codex-exec-json-failed.jsonl")
    assert commands(transcript) == [
        ('my-tool create --title "a b"', 127),
        ("rm -rf /", None),  # declined: never ran
        ("cat missing.txt", 1),  # status failed without an exit code
        ("python3 -c 'print(1)'", 0),  # not a shell wrapper: kept as is
    ]
    [call] = transcript.llm_calls
    assert (call.input_tokens, call.cache_read_tokens, call.output_tokens) == (2000, 3000, 200)
    assert call.tool_calls_made == 5  # 4 commands and a file change
    assert transcript.agent_reported_error == "stream disconnected before completion"
    assert transcript.finished


def test_codex_transient_error_is_forgotten_once_the_turn_completes() -> None:
    recovered = "\n".join(
        [
            '{"type":"turn.started"}',
            '{"type":"error","message":"Reconnecting... 1/5"}',
            '{"type":"turn.completed","usage":{"input_tokens":10,"output_tokens":1}}',
        ]
    )
    assert parse_transcript("codex-exec-json", recovered).agent_reported_error is None
    killed = recovered.rsplit("\n", 1)[0]
    transcript = parse_transcript("codex-exec-json", killed)
    assert transcript.agent_reported_error == "Reconnecting... 1/5"
    assert not transcript.finished


@pytest.mark.parametrize(
    ("wrapped", "inner"),
    [
        ("bash -lc ls", "ls"),
        ("/bin/bash -lc 'git status --short'", "git status --short"),
        ("/bin/zsh -lc \"echo 'hi there'\"", "echo 'hi there'"),
        ("bash -c 'a && b'", "a && b"),
        ("bash script.sh", "bash script.sh"),
        ("bash -lc 'unbalanced", "bash -lc 'unbalanced"),
        ("ls -la", "ls -la"),
    ],
)
def test_unwrap_shell(wrapped: str, inner: str) -> None:
    assert unwrap_shell(wrapped) == inner


# --- OpenCode ----------------------------------------------------------------------------


def test_opencode_1_steps_are_calls() -> None:
    transcript = parse("opencode-json", "opencode-json-1.jsonl")
    assert len(transcript.llm_calls) == 2
    input_tokens, cache_write, cache_read, output = token_sums(transcript)
    assert (input_tokens, output, cache_read, cache_write) == (22443, 118, 21415, 0)
    assert transcript.reported_cost_usd == pytest.approx(0.001)
    assert commands(transcript) == [("echo hello", 0)]
    assert transcript.commands[0].id == "r9bQWsNLvOrJGIOz"
    # step 1: 1767036061205 - 1767036059338 minus the 50 ms the tool ran
    assert transcript.llm_calls[0].latency_ms == 1817
    assert transcript.reported_duration_ms == 1767036064273 - 1767036059338
    assert transcript.finished


def test_opencode_2_exit_codes_from_metadata_and_invalid_tool_ignored() -> None:
    transcript = parse("opencode-json", "opencode-json-2.jsonl")
    assert len(transcript.llm_calls) == 10
    input_tokens, _, _, output = token_sums(transcript)
    assert (input_tokens, output) == (129122, 3157)
    assert transcript.reported_cost_usd == 0
    exit_codes = [code for _, code in commands(transcript)]
    assert len(exit_codes) == 8
    assert exit_codes.count(1) == 2 and exit_codes.count(0) == 6
    assert commands(transcript)[2] == ("cd output && go build", 1)
    assert transcript.llm_calls[0].tool_calls_made == 1  # the invalid call is still a call
    assert transcript.finished
    assert_cumulative(transcript)


def test_opencode_3_error_line_only() -> None:
    transcript = parse("opencode-json", "opencode-json-3.jsonl")
    assert transcript.agent_reported_error == (
        "Unexpected server error. Check server logs for details."
    )
    assert transcript.llm_calls == [] and not transcript.finished


def test_opencode_error_reads_its_cause_from_the_log_on_stderr() -> None:
    """OpenCode 1.18.33's stdout says only "Unexpected server error" (with a ref); its
    log, on stderr under the preset's --print-logs, has the cause under that ref."""
    name = "opencode-json-unknown-model"
    unknown = parse("opencode-json", f"{name}.jsonl", stderr=fixture(f"{name}.log"))
    assert unknown.agent_reported_error == (
        "ProviderModelNotFoundError: Model not found: anthropic/claude-sonnet-4. Did you "
        "mean: claude-sonnet-4-6, claude-sonnet-4-5, claude-sonnet-4-5-20250929? "
        "(OpenCode's log, err_5032415c)"
    )
    no_key = parse("opencode-json", "opencode-json-no-key.jsonl",
                   stderr=fixture("opencode-json-no-key.log"))  # fmt: skip
    assert no_key.agent_reported_error is not None
    assert no_key.agent_reported_error.endswith(
        "Did you mean: claude-sonnet-4-5, claude-sonnet-4-5-20250929?: OpenCode knows "
        "claude-sonnet-4-5 but has no provider anthropic for it, as when anthropic's API "
        "key is not set (OpenCode's log, err_7faa823c)"
    )
    assert no_key.outage is None  # the run's own configuration, not the provider's outage
    # Without the log (or another run's), stdout's words stand.
    for log in ("", fixture("opencode-json-no-key.log")):
        alone = parse("opencode-json", f"{name}.jsonl", stderr=log)
        assert alone.agent_reported_error == (
            "Unexpected server error. Check server logs for details."
        )


def test_opencode_error_status_reasoning_and_duplicate_step() -> None:
    transcript = parse("opencode-json", "opencode-json-error-status.jsonl")
    assert commands(transcript) == [("my-tool sync", 1), ("my-tool list", 4)]
    [call] = transcript.llm_calls  # the repeated step_finish (same part.id) is one call
    assert (call.input_tokens, call.output_tokens) == (1000, 130)  # reasoning is additive
    assert (call.cache_read_tokens, call.cache_write_tokens) == (500, 100)
    assert call.latency_ms == 2000 - 1000 - (300 + 100 + 50)
    assert call.tool_calls_made == 3
    assert transcript.reported_cost_usd == pytest.approx(0.002)
    assert transcript.agent_reported_error == "invalid api key"
    assert not transcript.finished  # last step asked for tools and nothing followed


# --- events.jsonl ------------------------------------------------------------------------


def test_events_jsonl_every_type_and_malformed_lines() -> None:
    transcript = parse_transcript(
        "events-jsonl", "agent says hi", events_text=fixture("events-all-types.jsonl")
    )
    assert transcript.structured and not transcript.exit_codes_approximate
    assert [
        (c.input_tokens, c.output_tokens, c.latency_ms, c.tool_calls_made)
        for c in transcript.llm_calls
    ] == [(1200, 80, 900, 1), (1500, 40, 700.5, 2)]
    second = transcript.llm_calls[1]
    assert (second.cache_read_tokens, second.cache_write_tokens) == (1000, 200)
    assert [c.cumulative_input for c in transcript.llm_calls] == [1200, 2700]
    assert transcript.model == "m-1"
    assert commands(transcript) == [
        ("my-tool create --title x", 0),
        ("my-tool list --bogus", 1),
        ("my-tool list", 2),  # its result came first
        ("my-tool  create   --title x", None),  # its result's exit code was malformed
    ]
    assert [(c.component, c.tokens) for c in transcript.components] == [
        (ComponentType.SYSTEM_PROMPT, 800),
        (ComponentType.TOOL_SCHEMA, 5400),  # "tool_schema": names match case-insensitively
    ]
    assert transcript.messages == ["assistant: Created the three notes."]
    assert transcript.events_file_malformed_lines == 6
    assert transcript.malformed_lines == 0


def test_events_jsonl_without_events_falls_back_to_plain_regex() -> None:
    for events_text in (None, "", " \n"):
        transcript = parse_transcript(
            "events-jsonl", fixture("plain-session.txt"), events_text, r"my-tool\s+(\S+)"
        )
        assert transcript.format == "events-jsonl"
        assert not transcript.structured and transcript.exit_codes_approximate
        assert len(transcript.commands) == 5


def test_events_file_overrides_stdout_kind_by_kind() -> None:
    events = "\n".join(
        [
            '{"type":"tool_call","id":"a","command":"my-tool create"}',
            '{"type":"tool_result","id":"a","exit_code":3}',
            '{"type":"component","component":"SKILL_PROMPT","tokens":42}',
            "not json",
        ]
    )
    transcript = parse("claude-stream-json", "claude-stream-json-3.jsonl", events_text=events)
    assert commands(transcript) == [("my-tool create", 3)]  # events' tool calls win
    assert token_sums(transcript)[:3] == (10, 3556, 17254)  # no llm_call events: Claude's
    assert [c.component for c in transcript.components] == [ComponentType.SKILL_PROMPT]
    assert transcript.reported_cost_usd == 0.24722425  # CLI totals stay
    assert transcript.events_file_malformed_lines == 1

    without_tool_calls = parse(
        "claude-stream-json",
        "claude-stream-json-3.jsonl",
        events_text='{"type":"llm_call","input_tokens":7,"output_tokens":1}',
    )
    assert commands(without_tool_calls) == [("ls -la", 0)]
    assert [c.input_tokens for c in without_tool_calls.llm_calls] == [7]


def test_plain_with_events_file_uses_its_exact_commands() -> None:
    transcript = parse(
        "plain",
        "plain-session.txt",
        command_pattern=r"my-tool",
        events_text='{"type":"tool_call","id":1,"command":"my-tool list"}\n'
        '{"type":"tool_result","id":1,"exit_code":0}',
    )
    assert commands(transcript) == [("my-tool list", 0)]
    assert transcript.structured and not transcript.exit_codes_approximate


# --- plain ---------------------------------------------------------------------------------


def test_plain_regex_fallback_guesses_exit_codes() -> None:
    transcript = parse("plain", "plain-session.txt", command_pattern=r"my-tool\s+(\S+)")
    assert commands(transcript) == [
        ('my-tool create --title "Rust ownership"', 0),
        ("my-tool link n1 n2", 1),  # "Error: ..." follows
        ("my-tool --help", 0),
        ("my-tool link n1 n3", 3),  # "exited with code 3" follows
        ("my-tool list", 0),
    ]
    assert not transcript.structured and transcript.exit_codes_approximate
    assert transcript.format == "plain"


def test_plain_without_pattern_identifies_no_commands() -> None:
    assert parse("plain", "plain-session.txt").commands == []


def test_unknown_format_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"unknown transcript format 'gemini'.*claude-stream-json"):
        parse_transcript("gemini", "")


# --- robustness ------------------------------------------------------------------------------


def test_reader_skips_blank_lines_counts_noise_and_tolerates_prefixes() -> None:
    lines = read_json_lines('\n{"a":1}\n\nStdout: {"b":2}\nwarning: x\n[{"c":3},{"d":4}]\n{"e":')
    assert lines.objects == [{"a": 1}, {"b": 2}, {"c": 3}, {"d": 4}]
    assert lines.malformed == 2
    assert lines.other_lines == ["warning: x", '{"e":']


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("output", ["", "garbage\n\x00\n{", "[1, 2]", "null"])
def test_every_format_survives_garbage(fmt: str, output: str) -> None:
    transcript = parse_transcript(fmt, output, events_text=output, command_pattern="x")
    assert transcript.llm_calls == []


@pytest.mark.parametrize(
    ("fmt", "name"),
    [
        ("claude-stream-json", "claude-stream-json-2.jsonl"),
        ("codex-exec-json", "codex-exec-json-1.jsonl"),
        ("opencode-json", "opencode-json-2.jsonl"),
    ],
)
def test_truncated_last_line_keeps_everything_before_it(fmt: str, name: str) -> None:
    text = fixture(name).rstrip("\n")
    cut = text[: text.rfind("\n") + 40]  # the last line loses all but 39 characters
    whole, truncated = parse_transcript(fmt, text), parse_transcript(fmt, cut)
    assert truncated.malformed_lines == whole.malformed_lines + 1
    assert len(truncated.commands) == len(whole.commands)


DEEP_LINES = ["[" * 1000, "[" * 1000 + "]" * 1000, '{"a":' * 1000 + "1" + "}" * 1000]


@pytest.mark.parametrize("deep", DEEP_LINES, ids=["open", "closed", "objects"])
@pytest.mark.parametrize(
    ("fmt", "name"),
    [
        ("claude-stream-json", "claude-stream-json-2.jsonl"),
        ("codex-exec-json", "codex-exec-json-1.jsonl"),
        ("opencode-json", "opencode-json-2.jsonl"),
        ("events-jsonl", "events-all-types.jsonl"),
    ],
)
def test_a_deeply_nested_line_is_one_malformed_line(fmt: str, name: str, deep: str) -> None:
    """JSON nested past the decoder's recursion limit raises RecursionError, not
    ValueError: it must count as one malformed line, the rest parsed as before."""
    lines = fixture(name).splitlines()
    damaged = "\n".join([*lines[:2], deep, *lines[2:]])
    field = "events_file_malformed_lines" if fmt == "events-jsonl" else "malformed_lines"
    if fmt == "events-jsonl":
        whole = parse_transcript(fmt, "", events_text=fixture(name))
        parsed = parse_transcript(fmt, "", events_text=damaged)
        alone = parse_transcript(fmt, "", events_text=deep)
    else:
        texts = (fixture(name), damaged, deep)
        whole, parsed, alone = (parse_transcript(fmt, text) for text in texts)
        assert deep[:20] in render_transcript(parsed, damaged, 10_000_000)
    assert getattr(parsed, field) == getattr(whole, field) + 1
    assert commands(parsed) == commands(whole)
    assert parsed.llm_calls == whole.llm_calls
    assert getattr(alone, field) == 1


# --- rendering -------------------------------------------------------------------------------


def test_render_events_transcript_shows_stdout_commands_and_messages() -> None:
    transcript = parse_transcript(
        "events-jsonl", "agent log line\n", events_text=fixture("events-all-types.jsonl")
    )
    text = render_transcript(transcript, "agent log line\n", 10_000)
    assert "agent log line" in text
    assert "$ my-tool list --bogus  [exit 1]" in text
    assert "$ my-tool  create   --title x  [exit unknown]" in text
    assert "assistant: Created the three notes." in text
    assert text.index("## Agent output") < text.index("## Commands") < text.index("## Messages")


def test_render_json_stream_shows_rendering_not_raw_json() -> None:
    output = fixture("claude-stream-json-errors.jsonl")
    text = render_transcript(parse_transcript("claude-stream-json", output), output, 10_000)
    assert '"type":"user"' not in text and '"type":"system"' not in text
    assert "[hook] stderr noise between lines" in text
    assert "$ my-tool create x  [exit 2]" in text
    assert "The agent reported an error: overloaded" in text
    assert "killed or crashed" in text


def test_render_plain_shows_output_only() -> None:
    output = fixture("plain-session.txt")
    transcript = parse_transcript("plain", output, command_pattern="my-tool")
    assert render_transcript(transcript, output, 10_000) == "## Agent output\n" + output.strip("\n")


def test_render_is_bounded_with_head_tail_and_cut_marker() -> None:
    output = "".join(f"line {i}\n" for i in range(5000))
    transcript = parse_transcript("plain", output)
    full = render_transcript(transcript, output, 10**9)
    bounded = render_transcript(transcript, output, 2000)
    assert len(full) > 2000 >= len(bounded) >= 1900
    marker = re.search(r"\n\n\[\.\.\. (\d+) characters cut \.\.\.\]\n\n", bounded)
    assert marker is not None
    head, tail = bounded[: marker.start()], bounded[marker.end() :]
    assert full.startswith(head) and full.endswith(tail)
    assert len(head) + int(marker.group(1)) + len(tail) == len(full)
    assert bound_text("short", 2000) == "short"


# --- the fixes of issue 11: real output of every CLI variant ---------------------------------


def _claude_call_lines(usages: list[dict[str, int]]) -> str:
    """One API call printed as several lines with disagreeing usage, as Claude Code 2.x
    does (a thinking block's line first, then the text line with the cache counts)."""
    lines = []
    for number, usage in enumerate(usages):
        thinking = {"type": "thinking", "thinking": "..."}
        block = thinking if number == 0 else {"type": "text", "text": "ok"}
        message = {"id": "msg_1", "model": "claude-sonnet-4", "content": [block], "usage": usage}
        lines.append(json.dumps({"type": "assistant", "message": message}))
    return "\n".join(lines)


def test_claude_lines_of_one_call_keep_the_max_of_each_usage_field() -> None:
    stream = _claude_call_lines(
        [
            {"input_tokens": 3, "cache_creation_input_tokens": 9642, "output_tokens": 8},
            {
                "input_tokens": 3,
                "cache_creation_input_tokens": 14392,
                "cache_read_input_tokens": 17254,
                "output_tokens": 2,
            },
        ]
    )
    [call] = parse_transcript("claude-stream-json", stream).llm_calls
    assert (call.input_tokens, call.cache_write_tokens, call.cache_read_tokens) == (3, 14392, 17254)
    assert call.output_tokens == 8


def test_claude_background_bash_without_notification_has_an_unknown_exit() -> None:
    lines = [
        line
        for line in fixture("claude-stream-json-2.jsonl").splitlines()
        if '"subtype":"task_notification"' not in line
    ]
    transcript = parse_transcript("claude-stream-json", "\n".join(lines))
    # The background one returned at once; the subagent's own Bash finished in the stream.
    assert commands(transcript) == [
        ("sleep 15; echo bash-done", None),
        ("sleep 20; echo agent-done", 0),
    ]


def test_codex_legacy_protocol_commands_and_completion() -> None:
    transcript = parse("codex-exec-json", "codex-legacy-json-1.jsonl")
    assert transcript.recognised and transcript.finished
    assert commands(transcript) == [("ls -1", 0)]
    assert transcript.commands[0].id == "call_I1o1QnQDtlLjGMg4Vd9HXJLd"
    assert transcript.llm_calls == [] and transcript.agent_reported_error is None
    # The build printed no agent_message: the answer is only in task_complete.
    assert transcript.messages == [
        "assistant: I can see the directory structure of your project. This appears to be "
        "a Rust project with a frontend/backend architecture, using pnpm for package "
        "management. The project includes various configuration files, documentation, "
        "and development assets."
    ]


def test_codex_legacy_final_message_is_not_repeated() -> None:
    events = [
        {"type": "task_started"},
        {"type": "agent_message", "message": "Done!"},
        {"type": "task_complete", "last_agent_message": "Done!"},
    ]
    text = "\n".join(json.dumps({"id": "1", "msg": event}) for event in events)
    assert parse_transcript("codex-exec-json", text).messages == ["assistant: Done!"]


def test_codex_legacy_model_comes_from_the_configuration_line() -> None:
    assert parse("codex-exec-json", "codex-legacy-json-2.jsonl").model == "codex-mini-latest"
    configured = '{"id":"0","msg":{"type":"session_configured","session_id":"s","model":"o4-mini"}}'
    assert parse_transcript("codex-exec-json", configured).model == "o4-mini"


def _legacy_stream(*events: Mapping[str, object]) -> str:
    return "\n".join(json.dumps({"id": "0", "msg": event}) for event in events)


_BEGIN = {"type": "exec_command_begin", "call_id": "c1", "command": ["bash", "-lc", "ls"]}
_END = {"type": "exec_command_end", "call_id": "c1", "exit_code": 0}
_MCP = {"type": "mcp_tool_call_begin", "call_id": "c2", "invocation": {"tool": "list"}}
_PATCH = {"type": "patch_apply_begin", "call_id": "c3", "auto_approved": True, "changes": {}}


def _usage(n: int) -> dict[str, object]:
    return {"type": "token_count", "input_tokens": n, "output_tokens": 1}


@pytest.mark.parametrize(
    ("events", "tools_per_call"),
    [
        # the response's tools run before its token_count
        ([_BEGIN, _END, _MCP, _usage(10), _usage(20)], [2, 0]),
        # a build that reports usage first: the turn's last call carries them
        ([_usage(10), _BEGIN, _END, _PATCH], [2]),
        ([_BEGIN, _END, _usage(10), _PATCH, _usage(20), _MCP], [1, 2]),
    ],
)
def test_codex_legacy_tool_calls_are_counted_on_the_turns_llm_call(
    events: list[dict[str, object]], tools_per_call: list[int]
) -> None:
    stream = _legacy_stream({"type": "task_started"}, *events, {"type": "task_complete"})
    transcript = parse_transcript("codex-exec-json", stream)
    assert [call.tool_calls_made for call in transcript.llm_calls] == tools_per_call
    assert commands(transcript) == [("ls", 0)]


def test_codex_legacy_tools_of_a_turn_without_usage_stay_off_earlier_turns() -> None:
    stream = _legacy_stream(
        {"type": "task_started"},
        _usage(10),
        {"type": "task_complete"},
        {"type": "task_started"},
        _BEGIN,
        _END,
        {"type": "task_complete"},
    )
    transcript = parse_transcript("codex-exec-json", stream)
    assert [call.tool_calls_made for call in transcript.llm_calls] == [0]
    assert commands(transcript) == [("ls", 0)]


def test_claude_4_a_bash_exit_claude_code_let_pass_is_recorded_non_zero() -> None:
    """grep found nothing and exited 1; Claude Code reports that as no error, with
    returnCodeInterpretation "No matches found"."""
    transcript = parse("claude-stream-json", "claude-stream-json-4.jsonl")
    # The background sleep had not exited when the stream ended: its exit is unknown.
    assert commands(transcript) == [("grep zzz notes.txt", 1), ("sleep 3", None)]
    assert [call.tool_calls_made for call in transcript.llm_calls] == [1, 1, 1, 1]
    assert transcript.reported_input_tokens == 40 and transcript.reported_output_tokens == 900
    assert transcript.reported_cost_usd == 0.02
    assert transcript.messages == ["result: done"]
    assert transcript.finished and transcript.agent_reported_error is None


@pytest.mark.parametrize(
    ("interpretation", "exit_code"),
    [("No matches found", 1), ("Files differ", 1), ("Command failed with exit code 3", 3)],
)
def test_claude_interpreted_exit_codes(interpretation: str, exit_code: int) -> None:
    use = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "diff a b"}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "", "is_error": False}
    lines = [
        {"type": "assistant", "message": {"id": "m1", "content": [use]}},
        {
            "type": "user",
            "message": {"content": [result]},
            "tool_use_result": {"stdout": "", "returnCodeInterpretation": interpretation},
        },
    ]
    transcript = parse_transcript("claude-stream-json", "\n".join(map(json.dumps, lines)))
    assert commands(transcript) == [("diff a b", exit_code)]


def test_codex_legacy_missing_api_key_is_reported_as_an_outage() -> None:
    transcript = parse("codex-exec-json", "codex-legacy-json-2.jsonl")
    assert transcript.recognised
    assert transcript.agent_reported_error is not None
    assert transcript.agent_reported_error.startswith(
        "Missing environment variable: `OPENAI_API_KEY`"
    )
    assert transcript.outage == transcript.agent_reported_error
    assert transcript.malformed_lines == 0  # the config and prompt lines are JSON, just not events


def test_codex_legacy_token_counts() -> None:
    transcript = parse("codex-exec-json", "codex-legacy-json-3.jsonl")
    assert token_sums(transcript) == (47, 0, 1627, 384)
    first = {"input_tokens": 100, "output_tokens": 5}
    events = [
        {"type": "task_started"},
        {"type": "token_count", "info": None},
        {"type": "token_count", "info": {"total_token_usage": first, "last_token_usage": first}},
        # a rate-limit update repeats the figures: not a new call
        {"type": "token_count", "info": {"total_token_usage": first, "last_token_usage": first}},
        # no last usage: the growth of the total
        {
            "type": "token_count",
            "info": {"total_token_usage": {"input_tokens": 250, "output_tokens": 9}},
        },
        {"type": "task_complete"},
    ]
    text = "\n".join(json.dumps({"id": "1", "msg": event}) for event in events)
    calls = parse_transcript("codex-exec-json", text).llm_calls
    assert [(c.input_tokens, c.output_tokens) for c in calls] == [(100, 5), (150, 4)]


def _codex_run(thread: str | None, input_tokens: int) -> list[str]:
    started = {"type": "thread.started", **({"thread_id": thread} if thread else {})}
    usage = {"input_tokens": input_tokens, "output_tokens": 1}
    return [
        json.dumps(started),
        '{"type":"turn.started"}',
        json.dumps({"type": "turn.completed", "usage": usage}),
    ]


@pytest.mark.parametrize(
    ("runs", "inputs"),
    [
        # exec, then exec resume of the same thread: the total goes on
        ([("t1", 1000), ("t1", 2100)], [1000, 1100]),
        # another thread starts from zero, though its total is larger
        ([("t1", 1000), ("t2", 1200)], [1000, 1200]),
        # a thread that names no id cannot be a resumed one
        ([(None, 1000), (None, 1200)], [1000, 1200]),
        # a total that went down restarted
        ([("t1", 1000), ("t1", 400)], [1000, 400]),
    ],
)
def test_codex_running_totals_restart_at_thread_boundaries(
    runs: list[tuple[str | None, int]], inputs: list[int]
) -> None:
    text = "\n".join(line for thread, total in runs for line in _codex_run(thread, total))
    calls = parse_transcript("codex-exec-json", text).llm_calls
    assert [call.input_tokens for call in calls] == inputs


def test_gemini_json_one_aggregate_call_per_model() -> None:
    transcript = parse("gemini-json", "gemini-json-1.json")
    calls = {call.model: call for call in transcript.llm_calls}
    pro, flash = calls["gemini-2.5-pro"], calls["gemini-2.5-flash"]
    assert (pro.input_tokens, pro.cache_read_tokens, pro.output_tokens) == (3676, 21263, 174)
    assert (flash.input_tokens, flash.cache_read_tokens, flash.output_tokens) == (8993, 0, 40)
    assert pro.input_tokens + pro.cache_read_tokens + pro.output_tokens == 25113  # its `total`
    assert flash.input_tokens + flash.output_tokens == 9033
    assert transcript.reported_llm_calls == 3
    assert transcript.messages == ["assistant: The capital of France is Paris."]
    assert transcript.recognised and transcript.finished
    assert transcript.agent_reported_error is None and transcript.reported_cost_usd is None


def test_gemini_stream_json() -> None:
    transcript = parse("gemini-stream-json", "gemini-stream-json-1.jsonl")
    [call] = transcript.llm_calls
    assert (call.input_tokens, call.output_tokens, call.cache_read_tokens) == (50, 200, 0)
    assert transcript.reported_duration_ms == 3000
    assert commands(transcript) == [("ls -la", None)]  # Gemini prints no exit code
    assert transcript.messages == ["assistant: Here are the files..."]
    assert transcript.model == "gemini-2.0-flash-exp"
    assert transcript.recognised and transcript.finished


def test_gemini_stream_2_tool_use_is_a_tool_call_of_its_llm_call() -> None:
    transcript = parse("gemini-stream-json", "gemini-stream-json-2.jsonl")
    [call] = transcript.llm_calls
    assert (call.input_tokens, call.cache_read_tokens, call.output_tokens) == (18609, 13673, 76)
    assert call.input_tokens + call.cache_read_tokens == 32282  # the result's input_tokens
    assert call.tool_calls_made == 1  # the google_web_search, as the result's stats say
    assert call.model == transcript.model == "auto-gemini-2.5"
    assert transcript.commands == []  # a web search is no shell command
    assert transcript.messages == ["assistant: Bogotá is the capital and largest city of Colombia."]
    assert transcript.reported_duration_ms == 6824
    assert transcript.malformed_lines == 3  # the CLI's three notices before the stream
    assert transcript.recognised and transcript.finished


def test_gemini_stream_after_warning_lines_with_exit_codes_and_cache() -> None:
    events = [
        {"type": "init", "session_id": "s", "model": "gemini-2.5-pro"},
        {
            "type": "tool_use",
            "tool_name": "run_shell_command",
            "tool_id": "a",
            "parameters": {"command": "false"},
        },
        {
            "type": "tool_result",
            "tool_id": "a",
            "status": "success",
            "output": "Command: false\nExit Code: 1",
        },
        {
            "type": "tool_use",
            "tool_name": "run_shell_command",
            "tool_id": "b",
            "parameters": {"command": "nope"},
        },
        {
            "type": "tool_result",
            "tool_id": "b",
            "status": "error",
            "error": {"type": "x", "message": "denied"},
        },
        {"type": "message", "role": "assistant", "content": "Do", "delta": True},
        {"type": "message", "role": "assistant", "content": "ne", "delta": True},
        {
            "type": "result",
            "status": "success",
            "stats": {"input_tokens": 900, "cached": 600, "input": 300, "output_tokens": 20},
        },
    ]
    noise = "Loaded cached credentials.\n[WARN] Skipping unreadable directory\n"
    stream = noise + "\n".join(map(json.dumps, events))
    transcript = parse_transcript("gemini-stream-json", stream)
    assert commands(transcript) == [("false", 1), ("nope", 1)]
    assert token_sums(transcript) == (300, 0, 600, 20)
    assert transcript.llm_calls[0].tool_calls_made == 2
    assert transcript.messages == ["assistant: Done"]
    assert transcript.malformed_lines == 2


def test_gemini_quota_error_is_an_outage_with_its_wait() -> None:
    quota = {
        "response": "",
        "error": {
            "type": "Error",
            "message": "[API Error: You exceeded your current quota. Please retry in 27.5s.] "
            "RESOURCE_EXHAUSTED",
            "code": 429,
        },
    }
    transcript = parse_transcript("gemini-json", json.dumps(quota))
    assert transcript.outage is not None and "quota" in transcript.outage
    assert transcript.retry_after_s == 27.5
    error = {"type": "x", "message": "429 Too Many Requests"}
    failed = json.dumps({"type": "result", "status": "error", "error": error, "stats": {}})
    assert parse_transcript("gemini-stream-json", failed).outage == "429 Too Many Requests"


@pytest.mark.parametrize(
    ("fmt", "line", "wait"),
    [
        (
            "claude-stream-json",
            '{"type":"result","subtype":"success","is_error":true,"api_error_status":429,'
            '"result":"API Error: 429 {\\"type\\":\\"rate_limit_error\\"}"}',
            None,
        ),
        (
            "claude-stream-json",
            '{"type":"result","subtype":"success","is_error":true,'
            '"result":"Claude AI usage limit reached|4102444800"}',
            "epoch",
        ),
        (
            "codex-exec-json",
            '{"type":"turn.started"}\n{"type":"turn.failed","error":{"message":'
            '"unexpected status 503 Service Unavailable; retry after 30 seconds"}}',
            30.0,
        ),
        (
            "opencode-json",
            '{"type":"error","error":{"name":"APIError","data":'
            '{"message":"Overloaded","statusCode":529}}}',
            None,
        ),
    ],
)
def test_provider_outages_are_set_apart(fmt: str, line: str, wait: object) -> None:
    transcript = parse_transcript(fmt, line)
    assert transcript.outage is not None and transcript.outage == transcript.agent_reported_error
    if wait == "epoch":
        assert transcript.retry_after_s is not None and transcript.retry_after_s > 3600
    else:
        assert transcript.retry_after_s == wait


def test_an_agents_own_error_is_not_an_outage() -> None:
    assert parse("claude-stream-json", "claude-json-2.json").outage is None  # a 400
    assert parse("codex-exec-json", "codex-exec-json-failed.jsonl").outage is None


ALL_SAMPLES = {
    "claude-stream-json": [
        "claude-stream-json-1.jsonl",
        "claude-stream-json-2.jsonl",
        "claude-stream-json-3.jsonl",
        "claude-json-1.json",
        "claude-json-2.json",
        "claude-stream-json-errors.jsonl",
        "claude-stream-json-4.jsonl",
    ],
    "codex-exec-json": [
        "codex-exec-json-1.jsonl",
        "codex-exec-json-2.jsonl",
        "codex-exec-json-3.jsonl",
        "codex-exec-json-failed.jsonl",
        "codex-legacy-json-1.jsonl",
        "codex-legacy-json-2.jsonl",
        "codex-legacy-json-3.jsonl",
    ],
    "opencode-json": [
        "opencode-json-1.jsonl",
        "opencode-json-2.jsonl",
        "opencode-json-3.jsonl",
        "opencode-json-error-status.jsonl",
    ],
    "gemini-json": ["gemini-json-1.json"],
    "gemini-stream-json": ["gemini-stream-json-1.jsonl", "gemini-stream-json-2.jsonl"],
}


@pytest.mark.parametrize("fmt", list(ALL_SAMPLES))
def test_each_parser_recognises_its_own_samples_and_no_other(fmt: str) -> None:
    """A transcript read with the wrong parser says so instead of passing for an
    empty session: Gemini's stream read as Claude's was `finished` with 0 calls."""
    for other, names in ALL_SAMPLES.items():
        for name in names:
            recognised = parse_transcript(fmt, fixture(name)).recognised
            gemini_pair = {fmt, other} == {"gemini-json", "gemini-stream-json"}
            assert recognised == (other == fmt or gemini_pair), (fmt, name)
    assert not parse_transcript(fmt, "plain words\n").recognised


def _documented_totals() -> dict[str, list[str]]:
    """SOURCES.md's table of each real capture's totals: file -> its other cells."""
    section = fixture("SOURCES.md").split("### Totals a correct parser gets")[1]
    section = section.split("\n## ")[0]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| ")]
    cells = [[cell.strip() for cell in row] for row in rows[1:]]  # past the header
    return {row[0]: row[1:] for row in cells}


def _real_captures() -> list[str]:
    table = fixture("SOURCES.md").split("## Real captures")[1].split("### Totals")[0]
    return [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ")][1:]


def test_every_real_capture_has_documented_totals() -> None:
    assert sorted(_documented_totals()) == sorted(_real_captures())


@pytest.mark.parametrize("name", sorted(_documented_totals()))
def test_every_real_capture_parses_to_its_documented_totals(name: str) -> None:
    """Read from the raw files by hand and written down in SOURCES.md: the calls, the
    run's tokens (reported totals over summed calls), the reported cost, each command's
    exit code, and how the stream ended."""
    fmt, calls, *tokens, cost, exits, ends = _documented_totals()[name]
    transcript = parse(fmt, name)
    spend = spend_of(transcript, None)
    figures = (spend.input_tokens, spend.cache_write_tokens, spend.cache_read_tokens)
    assert len(transcript.llm_calls) == int(calls)
    assert [*figures, spend.output_tokens] == [int(t) for t in tokens]
    reported = transcript.reported_cost_usd
    assert (reported if reported is not None else "-") == (cost if cost == "-" else float(cost))
    codes = [str(c.exit_code) if c.exit_code is not None else "?" for c in transcript.commands]
    assert (" ".join(codes) or "-") == exits
    ending = ["finished" if transcript.finished else "unfinished"]
    if transcript.outage is not None:
        ending.append("outage")
    elif transcript.agent_reported_error is not None:
        ending.append("error")
    assert ", ".join(ending) == ends


def test_every_fixture_is_listed_in_sources() -> None:
    sources = fixture("SOURCES.md")
    for path in TRANSCRIPTS.iterdir():
        assert path.name == "SOURCES.md" or path.name in sources, path.name


@pytest.mark.parametrize(
    ("message", "outage"),
    [
        ("API Error: 529 Overloaded", True),
        ("unexpected status 502 Bad Gateway", True),
        ("HTTP 401 Unauthorized", True),
        ("LLM call to http://x/chat/completions failed: HTTP 429: slow down", True),
        ("Missing environment variable: `OPENAI_API_KEY`. Create an API key", True),
        ("the file has 500 lines; refusing to read it", False),
        ("Error: Exit code 1", False),
        ("API Error: 400 prompt is too long", False),
    ],
)
def test_what_counts_as_a_provider_outage(message: str, outage: bool) -> None:
    from core.transcripts.outage import outage_of

    assert (outage_of(message) is not None) == outage


def test_every_format_auto_may_choose_has_samples_here() -> None:
    # A format registered with a recogniser is tried by `auto`: the two tests above and
    # below hold it to its own samples and no other's.
    assert set(ALL_SAMPLES) == {name for name, fmt in FORMATS.items() if fmt.recognises}


def test_auto_recognises_every_sample_and_records_its_choice() -> None:
    for fmt, names in ALL_SAMPLES.items():
        for name in names:
            chosen = parse_transcript("auto", fixture(name))
            assert chosen == parse(fmt, name), name  # the same as naming the format
    nothing = parse_transcript("auto", "just words\n")
    assert nothing.format == "auto" and not nothing.recognised
    # An events file stands in for stdout that no parser knows.
    events = parse_transcript("auto", "words\n", events_text=fixture("events-all-types.jsonl"))
    assert events.recognised and events.llm_calls


# Each CLI's stdout and its own record of the same session, the scripted server having
# served two requests: 1000 in / 50 out with a tool call, then 1200 / 10. Stdout alone
# gives them summed (Codex's turn, Gemini CLI's session) or with the output count of
# each response's start (Claude Code, whose result line has the exact total).
SESSION_RECORDS = [
    ("codex-exec-json", "codex-exec-json-rollout-1.jsonl", "codex-rollout-1.jsonl",
     [(2200, 60, 0)], None),
    ("gemini-stream-json", "gemini-stream-json-chat-1.jsonl", "gemini-chat-1.jsonl",
     [(2200, 60, 1)], None),
    ("claude-stream-json", "claude-stream-json-session-1.jsonl", "claude-session-1.jsonl",
     [(1000, 1, 1), (1200, 1, 0)], 60),
]  # fmt: skip


@pytest.mark.parametrize(
    ("fmt", "stdout", "record", "alone", "reported_output"),
    SESSION_RECORDS,
    ids=[fmt for fmt, *_ in SESSION_RECORDS],
)
def test_each_request_comes_from_the_clis_own_record_of_its_session(
    fmt: str,
    stdout: str,
    record: str,
    alone: list[tuple[int, int, int]],
    reported_output: int | None,
) -> None:
    """Codex's rollout file, Gemini CLI's chat recording (its first response written
    twice, again with its tool call: counted once), Claude Code's session log."""
    per_request = parse(fmt, stdout, session_text=fixture(record))
    assert _calls(per_request) == [(1000, 50, 1), (1200, 10, 0)]
    assert [c.cumulative_input for c in per_request.llm_calls] == [1000, 2200]
    from_stdout = parse(fmt, stdout)
    assert _calls(from_stdout) == alone
    assert from_stdout.reported_output_tokens == reported_output


def test_another_sessions_record_leaves_stdouts_calls() -> None:
    """A rollout whose figures are not this run's (another session, or cut short)."""
    other = parse("codex-exec-json", "codex-exec-json-1.jsonl", session_text=fixture(
        "codex-rollout-1.jsonl"
    ))  # fmt: skip
    assert len(other.llm_calls) == 1 and other.llm_calls[0].output_tokens == 122


def _calls(transcript: Transcript) -> list[tuple[int, int, int]]:
    return [(c.input_tokens, c.output_tokens, c.tool_calls_made) for c in transcript.llm_calls]


# --- figures no agent can make pricing, statistics or aggregation raise on ---------------

HUGE = "1" + "0" * 400  # a JSON integer float() overflows on


@pytest.mark.parametrize(
    "line",
    [
        f'{{"type":"llm_call","input_tokens":{HUGE},"output_tokens":0}}',
        '{"type":"llm_call","input_tokens":1000000000001,"output_tokens":0}',
        '{"type":"llm_call","input_tokens":1,"output_tokens":1,"cache_read_tokens":10000000000000}',
        '{"type":"llm_call","input_tokens":1,"output_tokens":1,"tool_calls":10000000000000}',
        '{"type":"llm_call","input_tokens":1,"output_tokens":1,"latency_ms":1e300}',
        '{"type":"llm_call","input_tokens":1,"output_tokens":1,"latency_ms":1e400}',
        '{"type":"llm_call","input_tokens":1,"output_tokens":1,"latency_ms":NaN}',
        '{"type":"llm_call","input_tokens":1,"output_tokens":1,"latency_ms":Infinity}',
        f'{{"type":"component","component":"TOOL_SCHEMA","tokens":{HUGE}}}',
        '{"type":"component","component":"TOOL_SCHEMA","tokens":1000000000001}',
    ],
)
def test_an_events_line_with_a_figure_beyond_its_ceiling_is_malformed(line: str) -> None:
    good = '{"type":"llm_call","input_tokens":10,"output_tokens":5}'
    transcript = parse_transcript("events-jsonl", "", events_text=f"{good}\n{line}\n")
    assert transcript.events_file_malformed_lines == 1
    assert [(c.input_tokens, c.output_tokens) for c in transcript.llm_calls] == [(10, 5)]
    assert transcript.components == []


def test_figures_at_their_ceilings_are_read() -> None:
    line = {"type": "llm_call", "input_tokens": 10**12, "output_tokens": 10**12,
            "latency_ms": 7 * 24 * 3600 * 1000}  # fmt: skip
    component = {"type": "component", "component": "TOOL_SCHEMA", "tokens": 10**12}
    text = f"{json.dumps(line)}\n{json.dumps(component)}\n"
    transcript = parse_transcript("events-jsonl", "", events_text=text)
    assert transcript.events_file_malformed_lines == 0
    assert transcript.llm_calls[0].input_tokens == 10**12
    assert transcript.components[0].tokens == 10**12


def _claude_result(**figures: object) -> str:
    usage = {"input_tokens": 10, "output_tokens": 5}
    message = {"id": "m1", "model": "m", "content": [{"type": "text", "text": "hi"}],
               "usage": usage}  # fmt: skip
    result = {"type": "result", "subtype": "success", "result": "ok", "usage": usage, **figures}
    return f"{json.dumps({'type': 'assistant', 'message': message})}\n{json.dumps(result)}\n"


@pytest.mark.parametrize(
    ("figures", "cost", "duration"),
    [
        ({"total_cost_usd": -1000, "duration_ms": -5}, None, None),
        ({"total_cost_usd": 1e300, "duration_ms": 1e300}, None, None),
        ({"total_cost_usd": 2_000_000, "duration_ms": 8 * 24 * 3600 * 1000}, None, None),
        ({"total_cost_usd": 0.25, "duration_ms": 1200}, 0.25, 1200.0),
        ({"total_cost_usd": -1, "cost_usd": 0.5}, 0.5, None),
    ],
)
def test_a_claude_result_cost_or_duration_beyond_reason_is_unknown(
    figures: dict[str, object], cost: float | None, duration: float | None
) -> None:
    transcript = parse_transcript("claude-stream-json", _claude_result(**figures))
    assert (transcript.reported_cost_usd, transcript.reported_duration_ms) == (cost, duration)
    assert transcript.finished and transcript.malformed_lines == 0


@pytest.mark.parametrize("figure", ["NaN", "Infinity", "-Infinity", "1e400", HUGE])
def test_a_claude_line_with_a_number_no_json_writer_prints_is_malformed(figure: str) -> None:
    output = _claude_result(total_cost_usd=0.0).replace(
        '"total_cost_usd": 0.0', f'"total_cost_usd": {figure}'
    )
    transcript = parse_transcript("claude-stream-json", output)
    assert transcript.malformed_lines == 1  # the result line: as if it never came
    assert not transcript.finished and transcript.reported_cost_usd is None
    assert [c.input_tokens for c in transcript.llm_calls] == [10]


@pytest.mark.parametrize(
    ("fmt", "line"),
    [
        ("claude-stream-json", {"type": "assistant", "message": {"id": "m", "model": "m",
         "content": [], "usage": {"input_tokens": 10**13, "output_tokens": 10**13}}}),
        ("codex-exec-json", {"type": "turn.completed",
         "usage": {"input_tokens": 10**13, "output_tokens": 10**13}}),
        ("opencode-json", {"type": "step_finish", "timestamp": 2e15, "part": {
         "id": "s", "cost": -3, "tokens": {"input": 10**13, "output": 10**13, "reasoning": 10**12,
         "cache": {"read": 10**13}}}}),
        ("gemini-json", {"response": "hi", "stats": {"duration_ms": 1e300, "models": {"m": {
         "tokens": {"prompt": 10**13, "candidates": 10**13, "cached": 10**13}}}}}),
    ],
)  # fmt: skip
def test_cli_token_counts_beyond_the_ceiling_count_as_zero(
    fmt: str, line: dict[str, object]
) -> None:
    transcript = parse_transcript(fmt, json.dumps(line) + "\n")
    for call in transcript.llm_calls:
        assert call.input_tokens + call.cache_read_tokens <= 10**12, call
        assert call.output_tokens <= 10**12, call
    assert transcript.reported_cost_usd is None and transcript.reported_duration_ms is None
    price = ModelPrice(input=3.0, output=15.0)
    spend_of(transcript, price)  # priced without overflow
