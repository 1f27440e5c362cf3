"""Figures an agent writes that nothing can price, sum or average (a token count of 400
digits, a cost that is negative or NaN) through the real CLI and real workers: each
run is recorded as what its agent did, failed runs counted as failed, and the
experiment gets its report (core.transcripts.jsonlines, core.evaluation.evaluate). And
tables an agent fills at will (subcommands by the ten thousand) stay bounded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.metrics.interaction import MAX_SUBCOMMANDS
from core.results.run import OTHER_SUBCOMMANDS, RunStatus
from core.store import Store
from tests.conftest import StartWorker, run_cli

# Runs 0 and 1 do the task; runs 2 and 3 fail it and try to have their failure left
# out of the statistics by writing, in their tier's way, a figure that once made the
# run an infrastructure error (or the aggregation raise, for good).
CHEATING_AGENT = r"""
import json, os, pathlib
tier, index = os.environ["EVALFLEET_TIER"], int(os.environ["EVALFLEET_RUN_INDEX"])
huge = "1" + "0" * 400
if index < 2:
    pathlib.Path("out.txt").write_text("done")
def event(line):
    with open(os.environ["EVALFLEET_EVENTS"], "a") as events:
        events.write(line + "\n")
event('{"type":"llm_call","input_tokens":10,"output_tokens":5}')
if index >= 2 and tier in ("priced", "unpriced"):
    event('{"type":"llm_call","input_tokens":' + huge + ',"output_tokens":0}')
if index >= 2 and tier == "component":
    event('{"type":"component","component":"TOOL_SCHEMA","tokens":' + huge + '}')
if tier.startswith("claude"):
    usage = {"input_tokens": 10, "output_tokens": 5}
    message = {"id": "m1", "model": "m", "content": [{"type": "text", "text": "hi"}],
               "usage": usage}
    cost = {"claude-negative": "-1000", "claude-nan": "NaN"}[tier] if index >= 2 else "0.01"
    print(json.dumps({"type": "assistant", "message": message}))
    result = {"type": "result", "subtype": "success", "result": "ok", "usage": usage,
              "total_cost_usd": "COST"}
    print(json.dumps(result).replace('"COST"', cost))
"""

MATRIX = """
name: hostile-figures
runs_per_tier: 4
agent: {kind: command, command: 'python3 "$EVALFLEET_MATRIX_DIR/agent.py"', timeout_s: 60,
        transcript: events-jsonl}
tiers:
  - {id: priced, agent: {model: claude-sonnet-4}}
  - {id: unpriced, agent: {model: no-such-model}}
  - {id: component}
  - {id: claude-negative, agent: {model: no-such-model, transcript: claude-stream-json}}
  - {id: claude-nan, agent: {model: no-such-model, transcript: claude-stream-json}}
scenarios:
  - {id: s, prompt: go, evaluation: {gates: [{type: file_exists, path: out.txt}]}}
"""


@pytest.mark.integration
def test_figures_beyond_reason_leave_failed_runs_failed_and_counted_and_the_report_made(
    tmp_path: Path,
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
) -> None:
    (tmp_path / "agent.py").write_text(CHEATING_AGENT)
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(MATRIX)
    start_worker(concurrency=2)
    result = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    assert report["experiment"]["status"] == "complete"
    assert report["experiment"]["errors"] == 0
    for tier, summary in report["tiers"].items():
        # 2 of 4, not 2 of 2: the failing runs are in the statistics.
        assert (summary["counted"], summary["passes"], summary["errors"]) == (4, 2, 0), tier
        assert summary["grade"] is not None, tier
    runs = store.results.all(report["experiment"]["id"])
    assert len(runs) == 20
    for run in runs:
        assert run.status is not RunStatus.infra_error, run.fail_reason
        assert run.status.counted, (run.run_id, run.status, run.fail_reason)
        assert run.passed == (run.run_index < 2), (run.run_id, run.fail_reason)
        if run.run_index >= 2:
            assert run.fail_reason is not None and "gates failed" in run.fail_reason
        if run.tier == "priced":
            assert run.cost_usd is not None and run.cost_usd < 1  # the huge call not priced
        if run.tier in ("priced", "unpriced", "component"):
            assert run.transcript_malformed_lines == (run.run_index >= 2), run.run_id
            assert [c.input_tokens for c in run.llm_calls] == [10]
        if run.tier.startswith("claude") and run.run_index >= 2:
            assert run.cost_usd is None  # unpriced, and no cost it reported is a cost
    listed = run_cli("report", report["experiment"]["id"], env=fleet_env)
    assert listed.returncode == 0, listed.stderr


# An agent that runs its tool's subcommands by the tens of thousands, each a new one.
MANY_SUBCOMMANDS_AGENT = r"""
import json, os, pathlib
pathlib.Path("out.txt").write_text("done")
with open(os.environ["EVALFLEET_EVENTS"], "w") as events:
    for i in range(30_000):
        events.write(json.dumps({"type": "tool_call", "id": str(i), "command": f"my-tool s{i}"}))
        events.write("\n")
    for i in range(3):
        events.write(json.dumps({"type": "tool_call", "command": "my-tool list --all"}) + "\n")
"""


@pytest.mark.integration
def test_distinct_subcommands_by_the_ten_thousand_keep_a_run_small(
    tmp_path: Path,
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
) -> None:
    (tmp_path / "agent.py").write_text(MANY_SUBCOMMANDS_AGENT)
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("""
name: many-subcommands
runs_per_tier: 2
agent: {kind: command, command: 'python3 "$EVALFLEET_MATRIX_DIR/agent.py"', timeout_s: 60,
        transcript: events-jsonl, max_transcript_bytes: 5000000}
tiers: [{id: T0}]
scenarios:
  - {id: s, prompt: go, target: {command_pattern: 'my-tool\\s+(\\S+)'},
     evaluation: {gates: [{type: file_exists, path: out.txt}]}}
""")
    start_worker(concurrency=2)
    result = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env, timeout=300)
    assert result.returncode == 0, result.stderr
    exp_id = json.loads(result.stdout)["experiment"]["id"]
    runs = store.results.all(exp_id)
    assert len(runs) == 2
    for run in runs:
        assert run.passed, run.fail_reason
        interaction = run.interaction
        assert interaction.total_commands == 30_003  # every command still counted
        assert len(interaction.per_subcommand) == MAX_SUBCOMMANDS + 1
        assert interaction.per_subcommand["list"].total == 3  # the most frequent kept
        other = interaction.per_subcommand[OTHER_SUBCOMMANDS]
        assert (other.total, other.unique) == (30_000 - 49, 30_000 - 49)
        assert interaction.subcommands_folded == 30_000 - 49
        assert len(run.model_dump_json()) < 20_000
    listed = run_cli("list", "--json", env=fleet_env)
    assert listed.returncode == 0, listed.stderr
    (mine,) = [e for e in json.loads(listed.stdout) if e["id"] == exp_id]
    assert mine["stored_bytes"] < 1_000_000, mine["stored_bytes"]
