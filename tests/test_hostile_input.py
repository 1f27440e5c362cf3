"""Hostile or broken input through the real CLI and real workers: a clean answer,
never a traceback, and never a run wrongly turned into an infrastructure error."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from core.results import RunStatus
from core.store import Store
from tests.conftest import run_cli

pytestmark = pytest.mark.integration

# An agent whose transcript carries one line nested deeper than json.loads can
# recurse, between good lines: Claude's stream on stdout, or our events file.
DEEP_AGENT = r"""
import json, os, pathlib
deep = "[" * 1000
pathlib.Path("out.txt").write_text("done")
if os.environ["EVALFLEET_TIER"] == "claude":
    usage = {"input_tokens": 10, "output_tokens": 5}
    content = [{"type": "text", "text": "done"}]
    message = {"id": "m1", "model": "m", "content": content, "usage": usage}
    print(json.dumps({"type": "assistant", "message": message}))
    print(deep)
    print(json.dumps({"type": "result", "subtype": "success", "result": "ok", "usage": usage}))
else:
    with open(os.environ["EVALFLEET_EVENTS"], "w") as events:
        message = {"type": "message", "role": "assistant", "text": "done"}
        call = {"type": "llm_call", "input_tokens": 10, "output_tokens": 5}
        events.write(f"{json.dumps(message)}\n{deep}\n{json.dumps(call)}\n")
"""


def test_a_deeply_nested_transcript_line_is_counted_and_the_run_scored(
    tmp_path: Path,
    fleet_env: dict[str, str],
    start_worker,
    store: Store,  # type: ignore[no-untyped-def]
) -> None:
    (tmp_path / "agent.py").write_text(DEEP_AGENT)
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("""
name: deep
runs_per_tier: 2
agent: {kind: command, command: 'python3 "$EVALFLEET_MATRIX_DIR/agent.py"', timeout_s: 60}
tiers:
  - {id: claude, agent: {transcript: claude-stream-json}}
  - {id: events, agent: {transcript: events-jsonl}}
scenarios:
  - {id: s, prompt: go, evaluation: {gates: [{type: file_exists, path: out.txt}]}}
""")
    start_worker(concurrency=2)
    result = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert result.returncode == 0, result.stderr
    exp_id = result.stdout.partition("\n")[0].strip()
    report = json.loads(result.stdout.partition("\n")[2])
    assert {tier: report["tiers"][tier]["errors"] for tier in ("claude", "events")} == {
        "claude": 0,
        "events": 0,
    }
    runs = store.runs(exp_id)
    assert len(runs) == 4
    for run in runs:
        assert run.status == RunStatus.completed, run.fail_reason
        assert run.passed and run.transcript_malformed_lines == 1
        assert [call.input_tokens for call in run.llm_calls] == [10]


COMMANDS = [
    ["submit", "matrix.yaml"],
    ["status"],
    ["list"],
    ["report"],
    ["compare", "A", "B"],
    ["resume", "A"],
    ["cancel", "A"],
    ["worker"],
]


@pytest.mark.parametrize(
    ("given_as", "url", "problem"),
    [
        ("--broker", "http://:s3cret-pw@127.0.0.1:6379/9", "it starts with http://"),
        ("environment", "127.0.0.1:6379/9", "it has no scheme"),
        ("environment", "redis://:s3cret-pw@127.0.0.1:port/9", "(Port could not be cast"),
        ("--broker", "redis://127.0.0.1:6379/db9", "(the database after the host must be a num"),
    ],
)
def test_a_malformed_broker_url_is_one_clear_line_and_exit_2_for_every_command(
    tmp_path: Path, given_as: str, url: str, problem: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALFLEET_")}
    for command in COMMANDS:
        if given_as == "--broker":
            result = run_cli(*command, "--broker", url, env=env, cwd=tmp_path, timeout=60)
        else:
            result = run_cli(*command, env={**env, "EVALFLEET_BROKER_URL": url}, cwd=tmp_path)
        assert result.returncode == 2, (command, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: the broker URL"), (command, lines)
        assert problem in lines[0] and "redis://" in lines[0], lines[0]
        assert "s3cret-pw" not in result.stderr + result.stdout
        assert not (tmp_path / ".evalfleet").exists()  # nothing embedded was started
