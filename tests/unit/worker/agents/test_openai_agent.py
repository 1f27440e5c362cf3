"""The built-in `openai` agent against the loopback LLM stub, with real bash commands."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from core.llm.client import MAX_RESPONSE_BYTES
from core.matrix import AgentConfig
from core.results.transcript import AgentOutcome, ComponentType
from core.transcripts import parse_transcript
from tests.support.llm_stub import (
    LLMStub,
    RecordedRequest,
    dribble,
    endless,
    malformed,
    reply,
    slow,
    status,
)
from worker.agents.openai_agent import BASH_TOOL, run_openai_agent

API_KEY = "sk-test-0123456789abcdef"
KEY_ENV = "STUB_API_KEY"
SYSTEM_PROMPT = "You are a careful engineer. Work in the current directory."
SKILL_TEXT = "# Skill: files\nAlways check that a file exists before reading it.\n"


def make_agent(base_url: str, tmp_path: Path, **overrides: Any) -> AgentConfig:
    skill = tmp_path / "skill.md"
    skill.write_text(SKILL_TEXT, encoding="utf-8")
    fields: dict[str, Any] = {
        "kind": "openai",
        "base_url": base_url,
        "model": "model-under-test",
        "api_key_env": KEY_ENV,
        "system_prompt": SYSTEM_PROMPT,
        "skills": [skill],
        "timeout_s": 30,
        **overrides,
    }
    return AgentConfig(**fields)


def run(
    agent: AgentConfig,
    tmp_path: Path,
    prompt: str = "Make the files.",
    api_key: str | None = API_KEY,
) -> tuple[AgentOutcome, list[dict[str, Any]], Path]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    events_path = tmp_path / "events.jsonl"
    env = {**os.environ, KEY_ENV: API_KEY, "EXTRA": "from-tier"}
    outcome = run_openai_agent(agent, prompt, workspace, events_path, env, api_key)
    events = [json.loads(line) for line in events_path.read_text(encoding="utf-8").splitlines()]
    return outcome, events, workspace


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def bash(command: str, call_id: str | None = None) -> dict[str, Any]:
    return {"name": "bash", "arguments": {"command": command}, "id": call_id}


def tool_messages(request: RecordedRequest) -> dict[str, str]:
    return {
        m["tool_call_id"]: m["content"] for m in request.body["messages"] if m["role"] == "tool"
    }


CONVERSATION = [
    reply(
        content="I'll create the first file.",
        tool_calls=[bash("echo hello > a.txt", "c1"), bash("cat missing.txt", "c2")],
        prompt_tokens=1200,
        completion_tokens=80,
    ),
    reply(
        tool_calls=[bash("mkdir sub && cp a.txt sub/b.txt && cat sub/b.txt; echo $EXTRA", "c3")],
        prompt_tokens=1450,
        completion_tokens=41,
    ),
    reply(content="Created a.txt and sub/b.txt.", prompt_tokens=1610, completion_tokens=12),
]


def test_multi_turn_tool_conversation_records_every_call(tmp_path: Path) -> None:
    with LLMStub(CONVERSATION, repeat_last=False) as stub:
        agent = make_agent(stub.base_url, tmp_path)
        outcome, events, workspace = run(agent, tmp_path)
        requests = stub.requests

    assert (outcome.exit_code, outcome.timed_out, outcome.error) == (0, False, None)
    assert outcome.completed
    assert (workspace / "a.txt").read_text() == "hello\n"
    assert (workspace / "sub" / "b.txt").read_text() == "hello\n"
    assert len(requests) == 3

    calls = of_type(events, "llm_call")
    assert [(c["input_tokens"], c["output_tokens"]) for c in calls] == [
        (1200, 80),
        (1450, 41),
        (1610, 12),
    ]
    assert [c["tool_calls"] for c in calls] == [2, 1, 0]
    assert [c["cumulative_input"] for c in calls] == [1200, 2650, 4260]
    assert all(c["model"] == "model-under-test" and c["latency_ms"] > 0 for c in calls)

    assert [(e["id"], e["command"]) for e in of_type(events, "tool_call")] == [
        ("c1", "echo hello > a.txt"),
        ("c2", "cat missing.txt"),
        ("c3", "mkdir sub && cp a.txt sub/b.txt && cat sub/b.txt; echo $EXTRA"),
    ]
    assert [(e["id"], e["exit_code"]) for e in of_type(events, "tool_result")] == [
        ("c1", 0),
        ("c2", 1),
        ("c3", 0),
    ]
    assert [e["text"] for e in of_type(events, "message")] == [
        "I'll create the first file.",
        "Created a.txt and sub/b.txt.",
    ]
    # Events come in conversation order: each call's record precedes what it caused.
    assert [e["type"] for e in events if e["type"] != "component"] == [
        "llm_call", "message", "tool_call", "tool_result", "tool_call", "tool_result",
        "llm_call", "tool_call", "tool_result",
        "llm_call", "message",
    ]  # fmt: skip

    components: dict[str, list[int]] = {}
    for event in of_type(events, "component"):
        components.setdefault(event["component"], []).append(event["tokens"])
    assert components["SYSTEM_PROMPT"] == [math.ceil(len(SYSTEM_PROMPT) / 4)]
    assert components["SKILL_PROMPT"] == [math.ceil(len(SKILL_TEXT) / 4)]
    assert components["TOOL_SCHEMA"] == [math.ceil(len(json.dumps([BASH_TOOL])) / 4)]
    assert len(components["TOOL_CALL"]) == 3 and all(t > 0 for t in components["TOOL_CALL"])
    assert len(components["TOOL_RESPONSE"]) == 3 and all(t > 0 for t in components["TOOL_RESPONSE"])

    # What the stub received: the tiered system prompt, the tool schema, and tool results.
    first = requests[0].body
    assert first["model"] == "model-under-test"
    assert first["tools"] == [BASH_TOOL]
    assert first["messages"][0] == {"role": "system", "content": f"{SYSTEM_PROMPT}\n\n{SKILL_TEXT}"}
    assert first["messages"][1] == {"role": "user", "content": "Make the files."}
    assert all(r.headers["authorization"] == f"Bearer {API_KEY}" for r in requests)
    assert all(r.path == "/v1/chat/completions" for r in requests)

    second = tool_messages(requests[1])
    assert second["c1"].endswith("[exit code 0]")
    assert "No such file" in second["c2"] and second["c2"].endswith("[exit code 1]")
    assistant = requests[1].body["messages"][2]
    assert [c["id"] for c in assistant["tool_calls"]] == ["c1", "c2"]
    third = tool_messages(requests[2])
    assert third["c3"] == "hello\nfrom-tier\n[exit code 0]"
    assert requests[2].body["messages"][-2]["tool_calls"][0]["function"]["name"] == "bash"

    assert "$ cat missing.txt" in outcome.stdout
    assert "[assistant] Created a.txt and sub/b.txt." in outcome.stdout
    assert not outcome.output_truncated


def test_events_parse_back_into_the_same_per_call_metrics(tmp_path: Path) -> None:
    with LLMStub(CONVERSATION, repeat_last=False) as stub:
        outcome, events, _ = run(make_agent(stub.base_url, tmp_path), tmp_path)

    events_text = (tmp_path / "events.jsonl").read_text(encoding="utf-8")
    transcript = parse_transcript("events-jsonl", outcome.stdout, events_text)

    assert transcript.events_file_malformed_lines == 0
    written = of_type(events, "llm_call")
    assert [
        (c.input_tokens, c.output_tokens, c.tool_calls_made, c.cumulative_input, c.latency_ms)
        for c in transcript.llm_calls
    ] == [
        (
            e["input_tokens"],
            e["output_tokens"],
            e["tool_calls"],
            e["cumulative_input"],
            e["latency_ms"],
        )
        for e in written
    ]
    assert transcript.model == "model-under-test"
    assert [(c.command, c.exit_code) for c in transcript.commands] == [
        ("echo hello > a.txt", 0),
        ("cat missing.txt", 1),
        ("mkdir sub && cp a.txt sub/b.txt && cat sub/b.txt; echo $EXTRA", 0),
    ]
    assert {c.component for c in transcript.components} == {
        ComponentType.SYSTEM_PROMPT,
        ComponentType.SKILL_PROMPT,
        ComponentType.TOOL_SCHEMA,
        ComponentType.TOOL_CALL,
        ComponentType.TOOL_RESPONSE,
    }


def test_api_key_stays_out_of_the_workspace_and_every_record(tmp_path: Path) -> None:
    script = [
        reply(tool_calls=[bash(f"echo key=${{{KEY_ENV}:-unset}}; echo {API_KEY}", "k1")]),
        reply(content=f"the key is {API_KEY}"),
    ]
    with LLMStub(script) as stub:
        outcome, _, _ = run(make_agent(stub.base_url, tmp_path), tmp_path)
        sent_back = tool_messages(stub.requests[1])["k1"]

    assert sent_back.startswith("key=unset\n")  # the variable is not passed to the tool
    written = (tmp_path / "events.jsonl").read_text() + outcome.stdout + outcome.stderr
    assert API_KEY not in written
    assert "[REDACTED]" in outcome.stdout


def test_without_a_key_no_authorization_header_and_no_tools_schema(tmp_path: Path) -> None:
    with LLMStub([reply(content="done")]) as stub:
        agent = make_agent(stub.base_url, tmp_path, tools=[], skills=[])
        outcome, events, _ = run(agent, tmp_path, api_key=None)
        request = stub.requests[0]

    assert outcome.exit_code == 0
    assert "authorization" not in request.headers
    assert "tools" not in request.body
    assert {e["component"] for e in of_type(events, "component")} == {"SYSTEM_PROMPT"}


def test_bash_call_when_tools_are_disabled_is_refused(tmp_path: Path) -> None:
    script = [reply(tool_calls=[bash("touch ran.txt", "b1")]), reply(content="ok")]
    with LLMStub(script) as stub:
        agent = make_agent(stub.base_url, tmp_path, tools=[])
        outcome, events, workspace = run(agent, tmp_path)
        sent_back = tool_messages(stub.requests[1])

    assert outcome.exit_code == 0
    assert not (workspace / "ran.txt").exists()
    assert of_type(events, "tool_result")[0]["exit_code"] == 127
    assert "available tools: none" in sent_back["b1"]


def test_max_turns_stops_with_exit_code_1_after_running_the_last_tools(tmp_path: Path) -> None:
    with LLMStub([reply(tool_calls=[bash("echo x >> turns.log")])]) as stub:
        outcome, events, workspace = run(make_agent(stub.base_url, tmp_path, max_turns=2), tmp_path)
        requests = len(stub.requests)

    assert requests == 2
    assert (outcome.exit_code, outcome.timed_out, outcome.error) == (1, False, None)
    assert "max_turns=2" in outcome.stderr
    assert (workspace / "turns.log").read_text() == "x\nx\n"
    assert len(of_type(events, "llm_call")) == 2
    assert [e["exit_code"] for e in of_type(events, "tool_result")] == [0, 0]


def test_deadline_during_a_slow_llm_call_times_out(tmp_path: Path) -> None:
    with LLMStub([slow(10)]) as stub:
        start = time.monotonic()
        outcome, events, _ = run(make_agent(stub.base_url, tmp_path, timeout_s=0.5), tmp_path)
        elapsed = time.monotonic() - start

    assert outcome.timed_out and outcome.exit_code is None and outcome.error is None
    assert elapsed < 3
    assert of_type(events, "llm_call") == []
    assert "deadline" in outcome.stderr


def test_a_dribbled_llm_response_ends_at_the_agent_deadline(tmp_path: Path) -> None:
    with LLMStub([dribble(reply(content="done"), interval_s=2.0)]) as stub:
        start = time.monotonic()
        outcome, events, _ = run(make_agent(stub.base_url, tmp_path, timeout_s=3), tmp_path)
        elapsed = time.monotonic() - start

    assert outcome.timed_out and outcome.exit_code is None
    assert elapsed < 4.5
    assert (
        "agent timeout: 3s deadline reached during an LLM call (no complete response within "
        "the 3 s deadline: the body was still arriving"
    ) in outcome.stderr
    assert of_type(events, "llm_call") == []


def test_an_endless_llm_response_is_cut_at_the_size_cap(tmp_path: Path) -> None:
    with LLMStub([endless()]) as stub:
        start = time.monotonic()
        outcome, _, _ = run(make_agent(stub.base_url, tmp_path), tmp_path)
        elapsed = time.monotonic() - start
        requests = len(stub.requests)

    assert outcome.exit_code == 1 and not outcome.timed_out
    assert outcome.error == (
        f"LLM call to {stub.base_url}/chat/completions failed: response body over the "
        f"{MAX_RESPONSE_BYTES}-byte limit: reading stopped there"
    )
    assert requests == 1 and elapsed < 20


def test_deadline_during_a_command_kills_it_and_starts_no_new_call(tmp_path: Path) -> None:
    script = [reply(tool_calls=[bash("sleep 20", "s1")]), reply(content="never asked")]
    with LLMStub(script) as stub:
        start = time.monotonic()
        outcome, events, _ = run(make_agent(stub.base_url, tmp_path, timeout_s=1), tmp_path)
        elapsed = time.monotonic() - start
        requests = len(stub.requests)

    assert outcome.timed_out and outcome.exit_code is None
    assert elapsed < 5
    assert requests == 1
    assert of_type(events, "tool_result") == [
        {"type": "tool_result", "id": "s1", "exit_code": None}
    ]


def test_server_error_is_retried_then_recorded(tmp_path: Path) -> None:
    with LLMStub([status(500, headers={"Retry-After": "0"})]) as stub:
        outcome, events, _ = run(make_agent(stub.base_url, tmp_path), tmp_path)
        requests = len(stub.requests)

    assert requests == 3
    assert outcome.exit_code == 1 and not outcome.timed_out
    assert outcome.error is not None and "HTTP 500" in outcome.error
    assert "after 3 attempts" in outcome.error
    assert "HTTP 500" in outcome.stdout and "retrying" in outcome.stderr
    assert of_type(events, "llm_call") == []


def test_unreachable_endpoint_is_retried_then_an_error(tmp_path: Path) -> None:
    with LLMStub([reply(content="unused")]) as stub:
        closed_url = stub.base_url  # nothing listens there once the stub is closed
    outcome, _, _ = run(make_agent(closed_url, tmp_path), tmp_path)

    assert outcome.exit_code == 1 and not outcome.timed_out
    assert outcome.error is not None and "ConnectError" in outcome.error
    assert outcome.stderr.count("retrying") == 2


def test_rate_limit_honours_retry_after_then_continues(tmp_path: Path) -> None:
    script = [status(429, headers={"Retry-After": "0.3"}), reply(content="ok", prompt_tokens=77)]
    with LLMStub(script) as stub:
        start = time.monotonic()
        outcome, events, _ = run(make_agent(stub.base_url, tmp_path), tmp_path)
        elapsed = time.monotonic() - start

    assert outcome.exit_code == 0
    assert elapsed >= 0.3
    assert [c["input_tokens"] for c in of_type(events, "llm_call")] == [77]
    assert "HTTP 429" in outcome.stderr


def test_client_error_is_not_retried(tmp_path: Path) -> None:
    with LLMStub([status(401, body={"error": {"message": "bad key"}})]) as stub:
        outcome, _, _ = run(make_agent(stub.base_url, tmp_path), tmp_path)
        requests = len(stub.requests)

    assert requests == 1
    assert outcome.error is not None and "HTTP 401" in outcome.error and "bad key" in outcome.error


def test_malformed_response_is_a_protocol_error(tmp_path: Path) -> None:
    with LLMStub([malformed("<html>gateway</html>")]) as stub:
        outcome, _, _ = run(make_agent(stub.base_url, tmp_path), tmp_path)

    assert outcome.exit_code == 1
    assert outcome.error is not None and outcome.error.startswith("protocol error")


def test_unknown_tool_and_unusable_arguments_are_failed_commands(tmp_path: Path) -> None:
    script = [
        reply(
            tool_calls=[
                {"name": "python", "arguments": {"code": "print(1)"}, "id": "u1"},
                {"name": "bash", "arguments": "{not json", "id": "u2"},
            ]
        ),
        reply(content="giving up"),
    ]
    with LLMStub(script) as stub:
        outcome, events, _ = run(make_agent(stub.base_url, tmp_path), tmp_path)
        sent_back = tool_messages(stub.requests[1])

    assert outcome.exit_code == 0
    assert [(e["id"], e["exit_code"]) for e in of_type(events, "tool_result")] == [
        ("u1", 127),
        ("u2", 2),
    ]
    assert "unknown tool 'python'" in sent_back["u1"] and "available tools: bash" in sent_back["u1"]
    assert "needs JSON arguments" in sent_back["u2"]


def test_transcript_is_bounded_with_a_cut_marker(tmp_path: Path) -> None:
    script = [reply(tool_calls=[bash("seq 1 3000")]), reply(content="final answer here")]
    with LLMStub(script) as stub:
        agent = make_agent(stub.base_url, tmp_path, max_transcript_bytes=1024)
        outcome, _, _ = run(agent, tmp_path)

    assert outcome.output_truncated
    assert len(outcome.stdout.encode()) <= 1024
    assert "bytes cut ..." in outcome.stdout
    assert outcome.stdout.startswith("$ seq 1 3000\n1\n2\n")
    assert outcome.stdout.endswith("[assistant] final answer here\n")


def test_unreadable_skill_file_is_a_clear_error(tmp_path: Path) -> None:
    with LLMStub([reply(content="unused")]) as stub:
        agent = make_agent(stub.base_url, tmp_path)
        (tmp_path / "skill.md").unlink()
        outcome, _, _ = run(agent, tmp_path)
        requests = len(stub.requests)

    assert requests == 0
    assert outcome.exit_code == 1
    assert outcome.error is not None and "skill.md" in outcome.error


def completion(**fields: Any) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": "hi"}}], **fields}


def test_response_without_usage_records_zero_tokens(tmp_path: Path) -> None:
    with LLMStub([status(200, body=completion())]) as stub:
        outcome, events, _ = run(make_agent(stub.base_url, tmp_path), tmp_path)

    assert outcome.exit_code == 0
    assert [(c["input_tokens"], c["output_tokens"]) for c in of_type(events, "llm_call")] == [
        (0, 0)
    ]


def test_response_without_choices_is_a_protocol_error(tmp_path: Path) -> None:
    with LLMStub([status(200, body={"usage": {"prompt_tokens": 5}})]) as stub:
        outcome, events, _ = run(make_agent(stub.base_url, tmp_path), tmp_path)

    assert outcome.error is not None and outcome.error.startswith("protocol error")
    assert of_type(events, "llm_call") == []


def test_spend_limits_stop_the_loop_between_calls(tmp_path: Path) -> None:
    """Each call costs $0.0012 (1000 in at $1/M, 100 out at $2/M): past max_cost_usd
    0.003 after the third, so no fourth is made; max_llm_calls 2 allows two."""
    from core.matrix import Limits, ModelPrice

    step = reply(tool_calls=[bash("true")], prompt_tokens=1000, completion_tokens=100)
    price = ModelPrice(input=1.0, output=2.0)
    for limits, calls, said in [
        (Limits(max_cost_usd=0.003), 3, "limit max_cost_usd 0.003 crossed: $0.0036 after 3"),
        (Limits(max_llm_calls=2), 2, "limit max_llm_calls 2 reached: 2 LLM calls"),
    ]:
        with LLMStub([step]) as stub:
            agent = make_agent(stub.base_url, tmp_path, max_turns=50)
            workspace = tmp_path / "ws"
            workspace.mkdir(exist_ok=True)
            outcome = run_openai_agent(
                agent,
                "go",
                workspace,
                tmp_path / "events.jsonl",
                dict(os.environ),
                None,
                limits,
                price,
            )
            assert len(stub.requests) == calls
        assert outcome.limit is not None and outcome.limit.startswith(said)
        assert outcome.stopped == outcome.limit and not outcome.completed
        assert outcome.exit_code is None and outcome.error is None
