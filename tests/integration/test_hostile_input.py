"""Hostile or broken input through the real CLI and real workers: a clean answer,
never a traceback, and never a run wrongly turned into an infrastructure error."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from core.results.run import RunStatus
from core.store import Store
from tests.conftest import PREFIX, QUEUE, SCHEDULER, StartWorker, run_cli, shared_with_agents
from tests.support.experiments import command_matrix

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


@pytest.mark.integration
def test_a_deeply_nested_transcript_line_is_counted_and_the_run_scored(
    tmp_path: Path,
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
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
    report = json.loads(result.stdout)
    exp_id = report["experiment"]["id"]
    assert {tier: report["tiers"][tier]["errors"] for tier in ("claude", "events")} == {
        "claude": 0,
        "events": 0,
    }
    runs = store.results.all(exp_id)
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


MATRIX = """\
name: big
runs_per_tier: {runs}
agent: {{kind: command, command: "true", timeout_s: 60}}
description: "{padding}"
tiers: [{tiers}]
scenarios: [{scenarios}]
"""


def matrix_text(tiers: int = 1, scenarios: int = 1, runs: int = 1, padding: int = 0) -> str:
    return MATRIX.format(
        runs=runs,
        padding="x" * padding,
        tiers=", ".join(f"{{id: T{i}}}" for i in range(tiers)),
        scenarios=", ".join(f"{{id: s{i}, prompt: go}}" for i in range(scenarios)),
    )


@pytest.mark.integration
def test_matrix_files_above_the_size_limit_are_refused_without_being_read_whole(
    tmp_path: Path, fleet_env: dict[str, str], store: Store
) -> None:
    big = tmp_path / "big.yaml"
    big.write_text(matrix_text(padding=1_500_000))  # valid, but 1.5 MB
    queued = store.redis.llen(QUEUE)
    for command in (["validate", "/dev/zero"], ["validate", str(big)], ["submit", str(big)]):
        result = run_cli(*command, env=fleet_env, timeout=60)
        assert result.returncode == 2, (command, result.stderr)
        assert "Traceback" not in result.stderr
        assert f"{command[1]}: larger than 1,000,000 bytes" in result.stderr, result.stderr
        assert "EVALFLEET_MAX_CONFIG_BYTES" in result.stderr
    assert store.redis.llen(QUEUE) == queued
    os.mkfifo(tmp_path / "pipe.yaml")
    piped = run_cli("validate", str(tmp_path / "pipe.yaml"), env=fleet_env, timeout=60)
    assert piped.returncode == 2 and "pipe.yaml: a pipe, not a file" in piped.stderr
    raised = {**fleet_env, "EVALFLEET_MAX_CONFIG_BYTES": "2000000"}
    allowed = run_cli("validate", str(big), env=raised)
    assert allowed.returncode == 0, allowed.stderr


@pytest.mark.integration
def test_a_plan_above_the_run_limit_is_refused_before_anything_is_stored_or_sent(
    tmp_path: Path, fleet_env: dict[str, str], store: Store
) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(matrix_text(tiers=20, scenarios=10, runs=100_000))  # 20,000,000 runs
    experiments = store.redis.zcard(f"{PREFIX}experiments")
    queued = store.redis.llen(QUEUE)
    for command in ("validate", "submit"):
        result = run_cli(command, str(matrix), env=fleet_env, timeout=60)
        assert result.returncode == 2, (command, result.stderr)
        assert "Traceback" not in result.stderr
        assert "= 20,000,000 runs, more than one experiment may have (200,000" in result.stderr
        assert "EVALFLEET_MAX_RUNS" in result.stderr
    assert store.redis.zcard(f"{PREFIX}experiments") == experiments
    assert store.redis.llen(QUEUE) == queued


def test_local_workers_asked_of_a_shared_broker_are_refused_before_anything_is_sent(
    tmp_path: Path, fleet_env: dict[str, str], store: Store
) -> None:
    """`--workers` starts the embedded mode's local workers: on a shared broker it would
    do nothing, and the user would wait for workers that never come. Refused before a
    preflight runs the agent, and the suggested worker is on the broker given."""
    ran = shared_with_agents(tmp_path / "ran")
    matrix = command_matrix(tmp_path / "m", f"echo ran >> {ran}; touch out.txt", runs=1)
    experiments = store.redis.zcard(f"{PREFIX}experiments")
    queued = store.redis.llen(QUEUE)
    url = fleet_env["EVALFLEET_BROKER_URL"]
    from_env = {k: v for k, v in fleet_env.items() if k != "EVALFLEET_BROKER_URL"}
    given: tuple[tuple[str, dict[str, str], list[str], str], ...] = (
        ("EVALFLEET_BROKER_URL", fleet_env, [], "scheduler worker --concurrency 2`"),
        ("--broker", from_env, ["--broker", url], "scheduler worker --concurrency 2 --broker "),
    )
    for where, env, broker, suggested in given:
        result = run_cli(
            "submit", str(matrix), "--preflight", "--workers", "2", *broker, env=env, timeout=60
        )
        assert result.returncode == 2, (where, result.stderr)
        said = " ".join(result.stderr.split())
        assert "Traceback" not in said
        assert f"shared broker (named by {where}), the runs go to" in said, said
        assert suggested in said, said
        assert result.stdout == ""
    assert ran.read_text() == ""  # no preflight ran the agent
    assert store.redis.zcard(f"{PREFIX}experiments") == experiments
    assert store.redis.llen(QUEUE) == queued


def _submit_peak_kb(matrix: Path, env: dict[str, str]) -> tuple[str, int]:
    """`scheduler submit`'s experiment id and peak resident memory (KB)."""
    proc = subprocess.Popen([SCHEDULER, "submit", str(matrix)], env=env, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)  # wait4: the child's peak memory too
    assert os.waitstatus_to_exitcode(status) == 0
    return out.strip(), usage.ru_maxrss


@pytest.mark.integration
def test_submit_streams_runs_to_the_broker_in_bounded_memory(
    tmp_path: Path, fleet_env: dict[str, str], store: Store
) -> None:
    # A queue no worker reads; the experiments are removed afterwards, so no
    # later sweep finds their runs.
    queue = f"{QUEUE}-bulk"
    env = {**fleet_env, "EVALFLEET_QUEUE": queue}
    peaks, ids = {}, []
    try:
        for runs in (500, 30_000):
            (tmp_path / str(runs)).mkdir()
            matrix = tmp_path / str(runs) / "matrix.yaml"
            matrix.write_text(matrix_text(tiers=2, scenarios=2, runs=runs // 4))
            exp_id, peaks[runs] = _submit_peak_kb(matrix, env)
            ids.append(exp_id)
            assert store.redis.llen(queue) == runs
            assert store.redis.hlen(f"{PREFIX}exp:{exp_id}:specs") == runs
            store.redis.delete(queue)
        # Holding every run at once cost about 1.6 KB a run (48 MB here) before.
        assert peaks[30_000] - peaks[500] < 15_000, peaks
    finally:
        store.redis.delete(queue)
        for exp_id in ids:
            store.redis.zrem(f"{PREFIX}experiments", exp_id)
            store.redis.delete(*store.redis.keys(f"{PREFIX}exp:{exp_id}*"))


@pytest.mark.integration
@pytest.mark.parametrize(
    ("variable", "value", "command", "expected"),
    [
        ("EVALFLEET_MAX_CONFIG_BYTES", "10k", "validate", "a whole number of 1 or more"),
        ("EVALFLEET_MAX_RUNS", "62.9", "submit", "a whole number of 1 or more"),
        ("EVALFLEET_MAX_RUNS", "0", "validate", "a whole number of 1 or more"),
        ("EVALFLEET_VISIBILITY_TIMEOUT", "0", "submit", "a number of seconds above 0"),
        ("EVALFLEET_SHUTDOWN_GRACE", "x", "worker", "a number of seconds, 0 or more"),
        ("EVALFLEET_SWEEP_S", "0", "worker", "a number of seconds above 0"),
        ("EVALFLEET_OUTAGE_BACKOFF_S", "nan", "worker", "a number of seconds, 0 or more"),
    ],
)
def test_a_setting_that_is_not_what_it_can_be_is_one_clear_error(
    tmp_path: Path,
    fleet_env: dict[str, str],
    store: Store,
    variable: str,
    value: str,
    command: str,
    expected: str,
) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(matrix_text())
    queued = store.redis.llen(QUEUE)
    args = ["worker", "--concurrency", "1"] if command == "worker" else [command, str(matrix)]
    result = run_cli(*args, env={**fleet_env, variable: value}, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert f"{variable}={value!r} is not {expected}" in result.stderr, result.stderr
    assert store.redis.llen(QUEUE) == queued


# An agent that does its task, then makes its events file a sparse file of gigabytes:
# no disk used (the workspace limit counts blocks), every byte of it read, once.
LAST_EVENT = '{"type":"llm_call","input_tokens":20,"output_tokens":5}\n'
SPARSE_EVENTS_AGENT = f"""
echo done > out.txt
echo '{{"type":"llm_call","input_tokens":10,"output_tokens":5}}' >> "$EVALFLEET_EVENTS"
truncate -s {{size}} "$EVALFLEET_EVENTS"
printf '%s\\n' '{LAST_EVENT.strip()}' >> "$EVALFLEET_EVENTS"
"""


@pytest.mark.integration
def test_a_sparse_events_file_of_gigabytes_is_read_bounded_and_the_run_scored(
    tmp_path: Path,
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
) -> None:
    (tmp_path / "agent.sh").write_text(SPARSE_EVENTS_AGENT.replace("{size}", "4G"))
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("""
name: sparse-events
runs_per_tier: 1
agent: {kind: command, command: 'bash "$EVALFLEET_MATRIX_DIR/agent.sh"', timeout_s: 60,
        transcript: events-jsonl, max_transcript_bytes: 100000, model: claude-sonnet-4}
tiers: [{id: T0}]
scenarios:
  - {id: s, prompt: go, evaluation: {gates: [{type: file_exists, path: out.txt}]}}
""")
    start_worker(concurrency=1)
    result = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env, timeout=300)
    assert result.returncode == 0, result.stderr
    exp_id = json.loads(result.stdout)["experiment"]["id"]
    (run,) = store.results.all(exp_id)
    assert run.status == RunStatus.completed and run.passed, run.fail_reason
    # Its first and last lines read; the gigabytes of NULs between them are not.
    assert [call.input_tokens for call in run.llm_calls] == [10, 20]
    assert run.transcript_truncated
    evidence = store.evidence.get(exp_id, run.run_id)
    assert evidence is not None
    cut = [c for c in evidence.cuts if c.startswith("events file:")]
    assert cut == [
        "events file: the agent wrote more than agent.max_transcript_bytes (100000); the "
        f"{4 * 2**30 + len(LAST_EVENT) - 100_000} bytes of its middle were cut unread"
    ], evidence.cuts
    assert len(evidence.transcript.text) < 200_000
