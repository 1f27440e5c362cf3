#!/usr/bin/env python3
"""A scripted stand-in for an AI agent, so the example runs offline with no API key.

It behaves like a model of the skill the tier gives it (STANDIN_SKILL, 0..1):
less skilled runs guess wrong syntax, fall back to --help and sometimes stop
short. With AGENTS.md in the workspace it follows the guidance and errs less.
Each run is seeded by its tier, scenario and index (not by the experiment), so
every submission of the example gives the same numbers. It writes
events.jsonl (LLM calls, commands with exit codes, token components) as any
agent may, and runs the real `my-tool` CLI so the gates check real state.
"""

import json
import os
import random
import subprocess
import time
from pathlib import Path

EVENTS = Path(os.environ["EVALFLEET_EVENTS"])
SKILL = float(os.environ.get("STANDIN_SKILL", "0.5"))
GUIDANCE = Path("AGENTS.md").read_text() if Path("AGENTS.md").exists() else ""
rng = random.Random(
    ":".join(os.environ[v] for v in ("EVALFLEET_TIER", "EVALFLEET_SCENARIO", "EVALFLEET_RUN_INDEX"))
)
context = 900 + len(GUIDANCE) // 4  # system prompt + guidance, in tokens
calls = 0


def emit(**event):
    with EVENTS.open("a") as f:
        f.write(json.dumps(event) + "\n")


def think(tool_calls=1, text=None):
    """One simulated LLM call: the context grows with every turn."""
    global context, calls
    calls += 1
    time.sleep(0.02)
    emit(
        type="llm_call",
        input_tokens=context,
        output_tokens=rng.randint(40, 120),
        latency_ms=rng.randint(300, 900),
        tool_calls=tool_calls,
        model=os.environ["EVALFLEET_MODEL"],
    )
    context += rng.randint(150, 300)
    if text:
        emit(type="message", role="assistant", text=text)
        print(text)


def run(command):
    think()
    cid = f"c{calls}"
    emit(type="tool_call", id=cid, command=command)
    proc = subprocess.run(command, shell=True, capture_output=True, text=True)
    emit(type="tool_result", id=cid, exit_code=proc.returncode)
    print(f"$ {command}\n{proc.stdout}{proc.stderr}", end="")
    return proc.returncode


emit(type="component", component="SYSTEM_PROMPT", tokens=900)
emit(type="component", component="TOOL_SCHEMA", tokens=350)
if GUIDANCE:
    emit(type="component", component="SKILL_PROMPT", tokens=len(GUIDANCE) // 4)

skill = min(1.0, SKILL + (0.4 if GUIDANCE else 0.0))
scenario = os.environ["EVALFLEET_SCENARIO"]
titles = ["Ownership", "Borrowing", "Lifetimes", "Traits"]

if rng.random() > skill:  # guesses the syntax, fails, reads the help
    run('my-tool new "Ownership"')
    run("my-tool --help")
wanted = 3 if scenario == "create_notes" else 2
made = wanted if rng.random() < skill + 0.2 else wanted - 1
for title in titles[:made]:
    run(
        f'my-tool create --title "{title} in Rust" --tag rust --content "Notes on {title.lower()}."'
    )
if scenario == "link_notes" and made >= 2 and rng.random() < skill + 0.1:
    run("my-tool link n1 n2")
run("my-tool list")
think(tool_calls=0, text=f"Done: created {made} notes.")
