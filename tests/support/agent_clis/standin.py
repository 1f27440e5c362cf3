#!/usr/bin/env python3
"""A stand-in for a real agent CLI (claude, codex, gemini, opencode: the name it is run by).

It checks the command line a preset built (non-interactive, JSON output, permission
flags, the model flag from $EVALFLEET_MODEL, the prompt from stdin or as one
argument, byte for byte) and then replays a recorded real output of that CLI from
tests/fixtures/transcripts. A wrong command line exits 2 with the difference on stderr.

STANDIN_OUTAGES=N with STANDIN_STATE=FILE: the first N invocations (counted in FILE,
across processes) print the provider's 429 as that CLI reports it, instead.
STANDIN_REPLAY=NAME replays another fixture.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "transcripts"

# In an expected argv: the run's id, as the preset passes it ($EVALFLEET_RUN_ID).
RUN_ID = "{run id}"
# name -> (argv before the model flag, argv after it, prompt as the last argument?, replay)
CLIS = {
    "claude": (
        ["-p", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions"],
        [],
        False,
        "claude-stream-json-3.jsonl",
    ),
    "codex": (
        ["exec", "--json", "--skip-git-repo-check", "--sandbox", "workspace-write"],
        ["-"],
        False,
        "codex-exec-json-1.jsonl",
    ),
    "gemini": (
        ["--output-format", "stream-json", "--yolo"],
        [],
        False,
        "gemini-stream-json-1.jsonl",
    ),
    "opencode": (
        ["run", "--format", "json", "--print-logs", "--log-level", "ERROR", "--title", RUN_ID],
        [],
        True,
        "opencode-json-1.jsonl",
    ),
}

OUTAGES: dict[str, list[dict[str, Any]]] = {
    "claude": [
        {"type": "system", "subtype": "init", "session_id": "s", "model": "claude-test"},
        {
            "type": "result",
            "subtype": "success",
            "is_error": True,
            "api_error_status": 429,
            "result": 'API Error: 429 {"type":"error","error":{"type":"rate_limit_error",'
            '"message":"Number of requests has exceeded your rate limit"}} (retry in 1s)',
        },
    ],
    "codex": [
        {"type": "thread.started", "thread_id": "0199-outage"},
        {"type": "turn.started"},
        {"type": "error", "message": "Reconnecting... 1/5"},
        {
            "type": "turn.failed",
            "error": {
                "message": "exceeded retry limit, last status: 429 Too Many Requests, "
                "retry after 1s"
            },
        },
    ],
    "gemini": [
        {"type": "init", "session_id": "s", "model": "gemini-test"},
        {
            "type": "result",
            "status": "error",
            "error": {
                "type": "Error",
                "message": "[API Error: You exceeded your current quota. "
                "Please retry in 1s.] RESOURCE_EXHAUSTED",
            },
            "stats": {},
        },
    ],
    "opencode": [
        {
            "type": "error",
            "sessionID": "s",
            "error": {
                "name": "APIError",
                "data": {"message": "Rate limit exceeded: 429 (retry in 1s)", "statusCode": 429},
            },
        }
    ],
}


def main() -> int:
    name = Path(sys.argv[0]).name
    before, after, prompt_argument, replay = CLIS[name]
    model = os.environ.get("EVALFLEET_MODEL", "")
    prompt = os.environ["PROMPT"]
    before = [os.environ["EVALFLEET_RUN_ID"] if arg == RUN_ID else arg for arg in before]
    expected = before + (["--model", model] if model else []) + after
    if prompt_argument:
        expected.append(prompt)
    got = sys.argv[1:]
    if got != expected:
        print(f"{name} stand-in: expected argv {expected!r}, got {got!r}", file=sys.stderr)
        return 2
    if not prompt_argument and sys.stdin.read() != prompt:
        print(f"{name} stand-in: stdin is not the prompt", file=sys.stderr)
        return 2
    if _in_outage():
        for event in OUTAGES[name]:
            print(json.dumps(event), flush=True)
        return 1
    Path("out.txt").write_text(f"{name} was here\n")
    delay = float(os.environ.get("STANDIN_LINE_DELAY_S", "0"))
    for line in (FIXTURES / os.environ.get("STANDIN_REPLAY", replay)).read_text().splitlines():
        print(line, flush=True)
        time.sleep(delay)
    return 0


def _in_outage() -> bool:
    """Whether this invocation is one of the first STANDIN_OUTAGES (counted in a file)."""
    outages = int(os.environ.get("STANDIN_OUTAGES", "0"))
    if not outages:
        return False
    with open(os.environ["STANDIN_STATE"], "a+") as state:
        fcntl.flock(state, fcntl.LOCK_EX)
        state.seek(0)
        calls = len(state.read().split())
        state.write(f"{calls + 1}\n")
    return calls < outages


if __name__ == "__main__":
    sys.exit(main())
