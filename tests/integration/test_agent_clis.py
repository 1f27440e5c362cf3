"""Real agent CLIs out of the box, through `scheduler submit` and real workers.

The presets' CLIs are stand-ins named like the real ones (tests.support.agent_clis.standin):
they check the command line the preset built (flags, model, the prompt byte for byte)
and replay a recorded real output of that CLI, so the real command line, the
environment and the parser are all exercised.

The real CLIs run in test_real_agent_clis (a real tool call, a 429 retried, a 401 of
each). The stand-ins stay for what the real CLIs at their pinned versions cannot be
driven to: the outputs of other versions (the fixtures' captures), an outage a CLI
keeps retrying for minutes (Gemini CLI backs off a 429 over minutes), and a stream
paced line by line to meet a spend limit mid-run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from core.results.run import NOT_RUN_NOTE, RunStatus
from core.store import Store
from tests.conftest import SUPPORT, StartWorker, run_cli, shared_with_agents

STANDINS = SUPPORT / "agent_clis"
# A prompt a shell would mangle if the preset let it: it must arrive byte for byte.
PROMPT = """Create out.txt. Don't run $(touch pwned) or `id`; "quoted" and 'single'\n"""


def preset_matrix(folder: Path, tiers: str, runs: int = 2, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "prompt.md").write_text(PROMPT)
    path = folder / "matrix.yaml"
    path.write_text(f"""
name: presets
runs_per_tier: {runs}
agent: {{preset: claude-code, env: {{PATH: "{STANDINS}:${{PATH}}"}}, timeout_s: 60}}
tiers:
{tiers}
scenarios:
  - id: s
    prompt_file: prompt.md
    evaluation: {{gates: [{{type: file_exists, path: out.txt}}]}}
pricing:
  gpt-test: {{input: 1.0, output: 2.0, cache_read: 0.1}}
  gemini-test: {{input: 1.0, output: 2.0}}
{extra}
""")
    return path


def submit(matrix: Path, env: dict[str, str]) -> tuple[int, dict, str]:
    # The stand-in CLIs need no key, and the workers would hold the real ones.
    result = run_cli("submit", str(matrix), "--wait", "--json", "--allow-missing-keys", env=env)
    return result.returncode, json.loads(result.stdout), result.stderr


@pytest.mark.integration
def test_each_preset_runs_its_cli_and_reads_its_real_output(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    matrix = preset_matrix(
        tmp_path,
        """  - {id: claude, agent: {model: claude-test}}
  - {id: codex, agent: {preset: codex, model: gpt-test}}
  - {id: gemini, agent: {preset: gemini-cli, model: gemini-test}}
  - {id: opencode, agent: {preset: opencode, model: ollama/qwen-test}}""",
    )
    start_worker(concurrency=2)
    code, report, stderr = submit(matrix, fleet_env)
    assert code == 0, stderr
    runs = store.results.all(report["experiment"]["id"])
    assert len(runs) == 8
    for run in runs:
        assert run.status == RunStatus.completed and run.passed, (run.tier, run.fail_reason)
        assert not run.transcript_unrecognised
    assert not (tmp_path / "pwned").exists()
    by_tier = {run.tier: run for run in runs}

    claude = by_tier["claude"]  # claude-stream-json-3: the CLI's own totals and cost
    assert claude.transcript_format == "claude-stream-json"
    assert (claude.input_tokens, claude.output_tokens) == (18, 424)
    # result.usage, though the stream holds only 1 of the 2 calls (3556 cache writes)
    assert (claude.cache_read_tokens, claude.cache_write_tokens) == (17254, 25067)
    assert claude.cost_usd == 0.24722425
    assert claude.interaction.total_commands == 1

    codex = by_tier["codex"]  # codex-exec-json-1: cached input is part of input
    assert codex.transcript_format == "codex-exec-json"
    assert (codex.input_tokens, codex.cache_read_tokens, codex.output_tokens) == (315, 24448, 122)
    assert codex.cost_usd == pytest.approx((315 * 1.0 + 122 * 2.0 + 24448 * 0.1) / 1e6)

    gemini = by_tier["gemini"]  # gemini-stream-json-1
    assert gemini.transcript_format == "gemini-stream-json"
    assert (gemini.input_tokens, gemini.output_tokens) == (50, 200)
    assert gemini.cost_usd == pytest.approx((50 * 1.0 + 200 * 2.0) / 1e6)

    opencode = by_tier["opencode"]  # opencode-json-1: per-step costs summed
    assert opencode.transcript_format == "opencode-json"
    assert (opencode.input_tokens, opencode.output_tokens) == (22443, 118)
    assert opencode.cache_read_tokens == 21415 and len(opencode.llm_calls) == 2
    assert opencode.cost_usd == pytest.approx(0.001)


@pytest.mark.integration
def test_a_worker_without_the_cli_records_an_infrastructure_error_and_stops_the_tier(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    matrix = preset_matrix(
        tmp_path,
        '  - {id: bare, agent: {preset: codex, env: {PATH: "/usr/bin:/bin"}}}',
        runs=5,
        extra="fail_fast: 2",
    )
    # The submitting machine is told first.
    validated = run_cli(
        "validate", str(matrix), "--allow-missing-keys", env={**fleet_env, "PATH": "/usr/bin:/bin"}
    )
    assert validated.returncode == 0, validated.stderr
    assert "agent CLI 'codex' (tiers bare) is not on this machine's PATH" in validated.stderr
    with_cli = {**fleet_env, "PATH": f"{STANDINS}:{fleet_env['PATH']}"}
    assert (
        "not on this machine's PATH"
        not in run_cli("validate", str(matrix), "--allow-missing-keys", env=with_cli).stderr
    )

    start_worker(concurrency=1)
    code, report, stderr = submit(matrix, fleet_env)
    assert code == 3, stderr
    runs = store.results.all(report["experiment"]["id"])
    reason = (
        "agent could not run: agent CLI not found: codex (preset codex; not on the worker's PATH)"
    )
    assert [r.status for r in runs] == [RunStatus.infra_error] * 5
    assert [r.fail_reason for r in runs] == [reason] * 2 + [reason + NOT_RUN_NOTE] * 3
    assert report["tiers"]["bare"]["counted"] == 0


@pytest.mark.integration
def test_a_transcript_in_another_format_is_said_and_never_scores(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    """Gemini's stream read as Claude's used to be a finished session with 0 calls."""
    matrix = preset_matrix(
        tmp_path,
        "  - {id: wrong, agent: {preset: gemini-cli, transcript: claude-stream-json}}",
        runs=3,
    )
    start_worker(concurrency=1)
    code, report, stderr = submit(matrix, fleet_env)
    assert code == 0, stderr
    # The follower says so once, whatever the number of runs.
    warning = "tier wrong: the agent's output is not claude-stream-json"
    assert stderr.count(warning) == 1, stderr
    runs = store.results.all(report["experiment"]["id"])
    assert len(runs) == 3 and all(r.transcript_unrecognised for r in runs)
    run = runs[0]
    assert run.transcript_unrecognised and run.status == RunStatus.agent_error
    assert not run.passed and run.gates_passed == 1
    assert "transcript not recognised: no line of the agent's output is claude-stream-json" in (
        run.fail_reason or ""
    )


def test_tier_presets_merge_as_written_and_as_stored(tmp_path: Path) -> None:
    """A tier naming another preset starts from it; one changing only the permission
    flags gets the matrix preset's command rebuilt. The same after the matrix's JSON
    round trip through the store, where the filled fields look given."""
    from core.matrix import Matrix, load_matrix

    path = tmp_path / "matrix.yaml"
    path.write_text("""
name: x
agent: {preset: claude-code, model: m, permission_flags: "--permission-mode acceptEdits"}
tiers:
  - {id: claude}
  - {id: codex, agent: {preset: codex}}
  - {id: bare, agent: {permission_flags: ""}}
  - {id: own, agent: {command: my-claude-wrapper}}
scenarios: [{id: s, prompt: go}]
""")
    loaded = load_matrix(path)
    stored = Matrix.model_validate_json(loaded.model_dump_json(), context={"check_files": False})
    for matrix in (loaded, stored):
        agents = {tier.id: matrix.agent_for(tier) for tier in matrix.tiers}
        assert "--permission-mode acceptEdits" in (agents["claude"].command or "")
        assert (agents["codex"].command or "").startswith("codex exec --json")
        assert "--sandbox workspace-write" in (agents["codex"].command or "")
        assert (agents["codex"].transcript, agents["codex"].api_key_env) == (
            "codex-exec-json",
            "OPENAI_API_KEY",
        )
        assert agents["bare"].command == (
            "claude -p --output-format stream-json --verbose "
            '${EVALFLEET_MODEL:+--model "$EVALFLEET_MODEL"} < "$PROMPT_FILE"'
        )
        assert agents["own"].command == "my-claude-wrapper"
        assert agents["own"].transcript == "claude-stream-json"


@pytest.mark.integration
def test_a_provider_outage_is_retried_and_never_scored(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    """The CLI's first two invocations meet a 429 (Codex's turn.failed, "retry after
    1s"): those deliveries store nothing and are sent again after the stated second;
    every run ends with one result of its own, none of them an outage."""
    state = shared_with_agents(tmp_path / "invocations")
    matrix = preset_matrix(
        tmp_path,
        f"""  - id: codex
    agent: {{preset: codex, model: gpt-test,
             env: {{STANDIN_OUTAGES: "2", STANDIN_STATE: "{state}"}}}}""",
        runs=3,
    )
    start_worker(concurrency=2)
    code, report, stderr = submit(matrix, fleet_env)
    assert code == 0, stderr
    runs = store.results.all(report["experiment"]["id"])
    assert len(runs) == 3 and all(r.status == RunStatus.completed and r.passed for r in runs)
    assert len(state.read_text().split()) == 5  # 3 runs, 2 of the deliveries again
    assert sum(r.attempts for r in runs) == 5
    retried = [r for r in runs if r.attempts > 1]
    assert sum(len(r.outages) for r in retried) == 2
    assert all("429 Too Many Requests" in o for r in retried for o in r.outages)
    tier = report["tiers"]["codex"]
    assert (tier["runs"], tier["counted"], tier["passes"], tier["errors"]) == (3, 3, 3, 0)


@pytest.mark.integration
def test_an_outage_that_outlasts_the_attempts_is_an_infrastructure_error(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    state = shared_with_agents(tmp_path / "invocations")
    matrix = preset_matrix(
        tmp_path,
        f"""  - id: gemini
    agent: {{preset: gemini-cli, env: {{STANDIN_OUTAGES: "99", STANDIN_STATE: "{state}"}}}}""",
        runs=1,
        extra="max_attempts: 2",
    )
    start_worker(concurrency=1)
    code, report, stderr = submit(matrix, fleet_env)
    assert code == 3, stderr
    [run] = store.results.all(report["experiment"]["id"])
    assert run.status == RunStatus.infra_error and run.outage and run.attempts == 2
    quota = "You exceeded your current quota. Please retry in 1s."
    assert run.fail_reason is not None and quota in run.fail_reason
    assert run.fail_reason.startswith("model provider outage: ")
    assert len(run.outages) == 2 and run.gates == []
    assert len(state.read_text().split()) == 2
    assert report["tiers"]["gemini"]["counted"] == 0
    # Both deliveries are in the run's evidence, the first with how it ended.
    evidence = store.evidence.get(run.experiment_id, run.run_id)
    assert evidence is not None
    first, last = evidence.attempts
    assert first.ended_at is not None and first.outcome.endswith("; sent again")
    for attempt in (first, last):
        assert attempt.outcome.startswith("infra_error: model provider outage: ")
        assert quota in attempt.outcome


@pytest.mark.integration
def test_a_streaming_cli_is_stopped_within_one_llm_call_of_its_cost_limit(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    """claude-stream-json-2 replayed a line every 0.2 s, priced so that its running cost
    is $0.0085, $0.0230, $0.0260, $0.0284, ... after calls 1, 2, 3, 4, ...: a limit of
    $0.025 is crossed by call 3, and the CLI is stopped there, not at its 8th call."""
    matrix = preset_matrix(
        tmp_path,
        """  - id: capped
    agent:
      model: haiku-test
      env: {STANDIN_REPLAY: claude-stream-json-2.jsonl, STANDIN_LINE_DELAY_S: "0.2"}
    limits: {max_cost_usd: 0.025, max_tokens: 10000000}""",
        runs=1,
        extra="  haiku-test: {input: 1.0, output: 5.0, cache_read: 0.1, cache_write: 1.25}",
    )
    start_worker(concurrency=1)
    code, report, stderr = submit(matrix, fleet_env)
    assert code == 0, stderr  # a real, failed result
    [run] = store.results.all(report["experiment"]["id"])
    assert run.status == RunStatus.limit and not run.passed
    assert run.limit is not None
    assert run.limit.startswith("limit max_cost_usd 0.025 crossed: $0.0259604 after 3 LLM calls")
    assert f"agent stopped: {run.limit}" in (run.fail_reason or "")
    assert 3 <= len(run.llm_calls) <= 4  # within one call of the crossing
    assert run.cost_usd is not None and 0.025 < run.cost_usd < 0.0284
    tier = report["tiers"]["capped"]
    assert (tier["counted"], tier["passes"], tier["statuses"]) == (1, 0, {"limit": 1})


@pytest.mark.integration
def test_a_missing_cli_is_said_as_an_infrastructure_error_alone(
    fleet_env: dict[str, str], start_worker: StartWorker, tmp_path: Path
) -> None:
    """No claude on the worker: its runs never ran, so neither their transcript's
    format nor their model's price is in question, and neither is hinted at."""
    matrix = preset_matrix(
        tmp_path,
        '  - {id: bare, agent: {model: claude-sonnet-4, env: {PATH: "/usr/bin:/bin"}}}',
        runs=2,
    )
    start_worker(concurrency=1)
    result = run_cli("submit", str(matrix), "--wait", "--allow-missing-keys", env=fleet_env)
    assert result.returncode == 3, result.stderr
    assert "infrastructure error: agent could not run: agent CLI not found: claude" in (
        result.stdout
    )
    assert "names the format" not in result.stderr
    assert "is not claude-stream-json" not in result.stdout + result.stderr
    assert "pricing:" not in result.stdout
    full = run_cli("report", result.stdout.split()[0], "--full", env=fleet_env).stdout
    assert "pricing:" not in full
    assert "no run was counted, so there is no frontier cost of pass and no best value" in full


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_an_agent_that_wrote_nothing_is_not_told_its_format_is_wrong(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """Under bwrap the matrix file is hidden: an agent reading it fails at once and
    writes nothing, which says nothing about the format its output is in."""
    matrix = preset_matrix(
        tmp_path,
        "  - {id: jailed, agent: {sandbox: bwrap, model: claude-sonnet-4,"
        " command: 'cat \"$EVALFLEET_MATRIX_DIR/matrix.yaml\" >/dev/null || exit 1'}}",
        runs=1,
    )
    start_worker(concurrency=1)
    result = run_cli("submit", str(matrix), "--wait", "--allow-missing-keys", env=fleet_env)
    assert result.returncode == 0, result.stderr
    assert "names the format" not in result.stderr
    assert "check `agent.transcript`" not in result.stdout
    [run] = store.results.all(result.stdout.split()[0])
    assert not run.transcript_unrecognised
    assert (run.fail_reason or "").startswith("agent exited with code 1: cat: ")
    assert "; no transcript: the agent wrote nothing on stdout; " in (run.fail_reason or "")


# A command agent writing Claude Code's stream as its own: the faker says a 429 met it
# whatever happened, the honest one reports its run.
HONEST_STREAM = (
    'touch out.txt; echo \'{"type":"result","subtype":"success","is_error":false,'
    '"result":"done","usage":{"input_tokens":10,"output_tokens":1}}\''
)
FAKED_OUTAGE = (
    'echo \'{"type":"result","subtype":"error_during_execution","is_error":true,'
    '"result":"API Error: 429 rate limit exceeded, retry in 0s"}\'; exit 1'
)


@pytest.mark.integration
def test_a_tier_whose_agents_report_outages_the_others_never_meet_is_named(
    fleet_env: dict[str, str], start_worker: StartWorker, tmp_path: Path
) -> None:
    """An outage only the transcript tells of buys a run another try and, at the last,
    leaves its failure out of the figures: an agent may say it met one to that end. A
    provider's outage reaches every tier running at the time alike, so the report names
    a tier meeting far more of them than the others (Fisher's exact test)."""
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(f"""
name: outages
runs_per_tier: 4
max_attempts: 2
agent: {{kind: command, command: {json.dumps(HONEST_STREAM)}, transcript: claude-stream-json,
         timeout_s: 30}}
tiers: [{{id: honest}}, {{id: faker, agent: {{command: {json.dumps(FAKED_OUTAGE)}}}}}]
scenarios:
  - {{id: s, prompt: go, evaluation: {{gates: [{{type: file_exists, path: out.txt}}]}}}}
""")
    start_worker(concurrency=2)
    code, report, stderr = submit(matrix, fleet_env)
    assert code == 3, stderr  # the faker's runs are all infrastructure errors
    tiers = report["tiers"]
    assert (tiers["faker"]["outages"], tiers["faker"]["errors"]) == (4, 4)
    assert (tiers["honest"]["outages"], tiers["honest"]["passes"]) == (0, 4)
    shown = run_cli("report", report["experiment"]["id"], env=fleet_env)
    assert shown.returncode == 0, shown.stderr
    named = [line for line in shown.stdout.splitlines() if "met a model provider outage" in line]
    assert named and all("faker: 4 of 4 runs met" in line for line in named)
    assert "the other tiers 0 of 4" in named[0]
