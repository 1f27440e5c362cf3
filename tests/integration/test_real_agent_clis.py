"""The real Claude Code, Codex, Gemini CLI and OpenCode under their presets, through
`scheduler submit` and a real worker, against the scripted model server (offline, at
no cost), as the user the tests run as: root in CI and in the compose image.

Each CLI's model makes one real tool call (its own shell tool writes out.txt), which
the gate checks; the run's tokens, cost and LLM calls are what the server served (see
SERVED for where each CLI tells its requests apart). The CLIs come
from npm at the versions pinned in .ci/agent-clis.json (.ci/install-agent-clis puts
them where EVALFLEET_TEST_AGENT_CLIS says); a test whose CLI is missing skips.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.matrix import ModelPrice
from core.matrix.presets import PRESETS
from core.metrics.pricing import cost_usd, price_for
from core.modelserver import ModelScript, ModelServer, ScriptedError, ScriptedToolCall, Turn, Usage
from core.modelserver.server import ServedRequest
from core.results.run import RunStatus
from core.store import Store
from tests.conftest import StartWorker, run_cli

PINS = Path(__file__).resolve().parents[2] / ".ci" / "agent-clis.json"
CLI_BIN = os.environ.get("EVALFLEET_TEST_AGENT_CLIS", "")
KEY = "sk-scripted-not-a-real-key"
PRICE = ModelPrice(input=3.0, output=15.0)  # Claude Sonnet 4.5's list price, which the
# CLIs that price their own calls (Claude Code, OpenCode) use; the matrix gives it to
# the other two.


@dataclass(frozen=True)
class Case:
    preset: str
    cli: str
    tool: ScriptedToolCall
    model: str
    # where the base URL goes: the tier's env, or the worker's (passed through)
    base_url_env: str
    base_url_path: str = ""


# The LLM calls each run records, each (input, output, tool calls): one per request the
# script serves. OpenCode prints each request's usage. Claude Code prints each request
# with the output count of the stream's start (1), Codex's `exec --json` and Gemini
# CLI's stream-json only the turn's or the session's totals; the record each keeps of
# its session in the run's home has each request, which the run reads
# (core/transcripts/claude.py, codex.py and gemini.py give the evidence).
SERVED = ((1000, 50, 1), (1200, 10, 0))
WRITE = "printf hello > out.txt"
# The one scenario of each matrix: the gate checks what the model's tool call wrote.
SCENARIO = """scenarios:
  - id: write
    prompt: Create out.txt holding the word hello.
    evaluation: {gates: [{type: file_contains, path: out.txt, substring: hello}]}
"""
CASES = [
    Case("claude-code", "claude", ScriptedToolCall(name="Bash", arguments={"command": WRITE}),
         "claude-sonnet-4-5", "ANTHROPIC_BASE_URL"),
    Case("codex", "codex", ScriptedToolCall(name="exec_command", arguments={"cmd": WRITE}),
         "gpt-5-codex", "OPENAI_BASE_URL", "/v1"),
    Case("gemini-cli", "gemini",
         ScriptedToolCall(name="run_shell_command", arguments={"command": WRITE}),
         "gemini-2.5-pro", "GOOGLE_GEMINI_BASE_URL"),
    Case("opencode", "opencode",
         ScriptedToolCall(name="bash", arguments={"command": WRITE, "description": "write"}),
         "anthropic/claude-sonnet-4-5", "ANTHROPIC_BASE_URL", "/v1"),
]  # fmt: skip


def script_for(case: Case) -> ModelScript:
    return ModelScript(
        turns=[
            Turn(text="Writing out.txt.", tool_calls=[case.tool],
                 usage=Usage(input_tokens=1000, output_tokens=50)),
            Turn(text="done", usage=Usage(input_tokens=1200, output_tokens=10)),
        ]
    )  # fmt: skip


def cli_path(cli: str) -> str:
    found = shutil.which(cli, path=f"{CLI_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        pins = ", ".join(f"{k}@{v}" for k, v in json.loads(PINS.read_text()).items())
        pytest.skip(
            f"the real `{cli}` is not installed: .ci/install-agent-clis installs {pins} "
            "(npm) and EVALFLEET_TEST_AGENT_CLIS names its bin folder"
        )
    return found


def submit(matrix: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`scheduler submit --wait --json`: the keys are the workers' (given to
    start_worker), not this shell's."""
    return run_cli("submit", str(matrix), "--wait", "--json", "--allow-missing-keys", env=env)


def _submit_case(
    case: Case,
    model: str | None,
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    worker_home: Path,
    tmp_path: Path,
) -> tuple[subprocess.CompletedProcess[str], list[ServedRequest]]:
    """One run of `case`'s CLI against the scripted server (with `model`, priced at
    PRICE; without, the CLI's own default and evalfleet's built-in price): the submit
    and every request the server had."""
    binary = Path(cli_path(case.cli))
    worker_home.mkdir()
    with ModelServer(script_for(case), record=tmp_path / "requests.jsonl") as server:
        base_url = server.base_url + case.base_url_path
        tier_env = {"PATH": f"{binary.parent}:${{PATH}}"}
        worker_env = {"HOME": str(worker_home), "ANTHROPIC_API_KEY": KEY,
                      "OPENAI_API_KEY": KEY, "GEMINI_API_KEY": KEY}  # fmt: skip
        if case.preset == "claude-code":
            worker_env[case.base_url_env] = base_url  # the preset passes it through
        else:
            tier_env[case.base_url_env] = base_url
        key_env = ", api_key_env: ANTHROPIC_API_KEY" if case.preset == "opencode" else ""
        model_key = f", model: {model}" if model else ""
        pricing = (
            f"pricing:\n  {model.split('/')[-1]}: {{input: {PRICE.input}, output: {PRICE.output}}}"
            if model
            else ""
        )
        matrix = tmp_path / "matrix.yaml"
        matrix.write_text(f"""
name: real-{case.preset}
runs_per_tier: 1
agent: {{preset: {case.preset}{model_key}, timeout_s: 180{key_env},
         env: {json.dumps(tier_env)}}}
tiers: [{{id: {case.preset}}}]
scenarios:
  - id: write
    prompt: Create out.txt holding the word hello.
    evaluation:
      gates:
        - {{type: file_contains, path: out.txt, substring: hello}}
{pricing}
""")
        start_worker(extra_env=worker_env, concurrency=1)
        return submit(matrix, fleet_env), server.requests()


def _session(requests: list[ServedRequest]) -> list[ServedRequest]:
    """The model calls of the session: a side request (OpenCode's title) offers no tools."""
    return [r for r in requests if r.turn is not None and r.body and r.body.get("tools")]


DEFAULTS = [c for c in CASES if PRESETS[c.preset].default_model is not None]


@pytest.mark.integration
@pytest.mark.parametrize("case", DEFAULTS, ids=[c.preset for c in DEFAULTS])
def test_without_a_model_the_pinned_cli_asks_for_its_presets_default_which_is_priced(
    case: Case,
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    tmp_path: Path,
) -> None:
    """The preset's `default_model` is what the pinned CLI asks for when the matrix
    names none (bumping a CLI's pin fails here until it is updated), and it has a
    built-in price."""
    default = PRESETS[case.preset].default_model
    submitted, requests = _submit_case(
        case, None, fleet_env, start_worker, tmp_path / "worker-home", tmp_path
    )
    assert submitted.returncode == 0, submitted.stderr
    asked = [r.model for r in requests if r.turn is not None]
    assert asked and set(asked) == {default}, [(r.path, r.model) for r in requests]
    assert price_for(default, {}) is not None


@pytest.mark.integration
@pytest.mark.parametrize("case", CASES, ids=[c.preset for c in CASES])
def test_real_cli_makes_a_real_tool_call_against_the_scripted_server(
    case: Case,
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    worker_home = tmp_path / "worker-home"
    submitted, requests = _submit_case(
        case, case.model, fleet_env, start_worker, worker_home, tmp_path
    )
    served = _session(requests)
    side = [r for r in requests if r.turn is not None and r not in served]
    assert submitted.returncode == 0, submitted.stderr
    report = json.loads(submitted.stdout)
    (run,) = store.results.all(report["experiment"]["id"])
    assert run.status == RunStatus.completed and run.passed, (
        run.fail_reason,
        store.evidence.get(run.experiment_id, run.run_id),
    )
    assert not run.transcript_unrecognised
    assert [r.turn for r in served] == [0, 1]  # two requests: the tool call, then "done"
    assert all(r.status == 200 for r in requests if r.protocol)
    # Served: 1000 + 1200 input and 50 + 10 output tokens over two turns.
    assert (run.input_tokens, run.output_tokens) == (2200, 60)
    calls = tuple((c.input_tokens, c.output_tokens, c.tool_calls_made) for c in run.llm_calls)
    assert calls == SERVED
    assert run.cost_usd == pytest.approx(cost_usd(2200, 60, PRICE))
    assert run.interaction.total_commands == 1  # the shell tool's `printf`, every CLI
    # The CLI's state stayed in the run's own home: the worker's is untouched.
    assert list(worker_home.iterdir()) == []
    assert all(KEY not in line for line in (tmp_path / "requests.jsonl").read_text().splitlines())
    if case.preset == "opencode":
        # Its preset names the session: OpenCode asks no second model for a title, a
        # request whose tokens it would report nowhere (its stdout, its session store).
        assert side == []
    assert len(side) <= 1


@pytest.mark.integration
def test_real_claude_codes_own_report_of_an_outage_is_retried_then_never_scored(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    """The server answers a 429, then 401s: what the real Claude Code prints of each is
    read as a provider outage. The 429's delivery is sent again (and then passes); the
    401 outlasts `max_attempts` and is an infrastructure error, never a failed run."""
    binary = Path(cli_path("claude"))
    write = CASES[0].tool
    limited = ModelScript(
        turns=[
            Turn(error=ScriptedError(status=429, retry_after=0)),
            Turn(text="Writing.", tool_calls=[write]),
            Turn(text="done"),
        ]
    )
    refused = ModelScript(turns=[Turn(error=ScriptedError(status=401))])
    with ModelServer(limited) as once, ModelServer(refused) as always:
        matrix = tmp_path / "matrix.yaml"
        matrix.write_text(f"""
name: real-outages
runs_per_tier: 1
max_attempts: 2
agent:
  preset: claude-code
  model: claude-sonnet-4-5
  timeout_s: 120
  # Claude Code's own retries (ten, over minutes) left to evalfleet's.
  env: {{PATH: "{binary.parent}:${{PATH}}", CLAUDE_CODE_MAX_RETRIES: "0"}}
tiers:
  - {{id: limited, agent: {{env: {{ANTHROPIC_BASE_URL: "{once.base_url}"}}}}}}
  - {{id: refused, agent: {{env: {{ANTHROPIC_BASE_URL: "{always.base_url}"}}}}}}
{SCENARIO}""")
        start_worker(extra_env={"ANTHROPIC_API_KEY": KEY}, concurrency=1)
        submitted = submit(matrix, fleet_env)
    assert submitted.returncode == 3, submitted.stderr  # some runs were infrastructure errors
    runs = {r.tier: r for r in store.results.all(json.loads(submitted.stdout)["experiment"]["id"])}
    passed = runs["limited"]
    assert passed.status == RunStatus.completed and passed.passed, passed.fail_reason
    assert passed.attempts == 2 and len(passed.outages) == 1 and "429" in passed.outages[0]
    failed = runs["refused"]
    assert failed.status == RunStatus.infra_error and failed.outage, failed.fail_reason
    assert failed.attempts == 2 and failed.gates == []
    assert failed.fail_reason is not None and "401" in failed.fail_reason


@pytest.mark.integration
@pytest.mark.parametrize("case", CASES, ids=[c.preset for c in CASES])
def test_each_real_clis_report_of_a_refused_key_is_an_outage_not_a_failed_run(
    case: Case,
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    """A 401 from the server, as each real CLI reports it (none retries one): the run is
    an infrastructure error, counted apart, never scored as the agent's failure."""
    binary = Path(cli_path(case.cli))
    with ModelServer(ModelScript(turns=[Turn(error=ScriptedError(status=401))])) as server:
        tier_env = {"PATH": f"{binary.parent}:${{PATH}}",
                    case.base_url_env: server.base_url + case.base_url_path}  # fmt: skip
        key_env = ", api_key_env: ANTHROPIC_API_KEY" if case.preset == "opencode" else ""
        matrix = tmp_path / "matrix.yaml"
        matrix.write_text(f"""
name: real-401-{case.preset}
runs_per_tier: 1
max_attempts: 1
agent: {{preset: {case.preset}, model: {case.model}, timeout_s: 120{key_env},
         env: {json.dumps({**tier_env, "CLAUDE_CODE_MAX_RETRIES": "0"})}}}
tiers: [{{id: {case.preset}}}]
{SCENARIO}""")
        start_worker(extra_env={"ANTHROPIC_API_KEY": KEY, "OPENAI_API_KEY": KEY,
                                "GEMINI_API_KEY": KEY}, concurrency=1)  # fmt: skip
        submitted = submit(matrix, fleet_env)
        assert server.model_requests(), "the CLI never reached the server"
    (run,) = store.results.all(json.loads(submitted.stdout)["experiment"]["id"])
    assert run.status == RunStatus.infra_error and run.outage, (run.status, run.fail_reason)
    assert run.fail_reason is not None and run.fail_reason.startswith("model provider outage: ")
    assert submitted.returncode == 3


@pytest.mark.integration
def test_real_opencode_through_an_openai_compatible_provider_streams_chat_completions(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    """OpenCode's provider for any OpenAI-compatible endpoint (a gateway, vLLM, the
    scripted server): streamed Chat Completions, its usage chunk read for the tokens."""
    binary = Path(cli_path("opencode"))
    with ModelServer(script_for(CASES[3])) as server:
        provider = {"npm": "@ai-sdk/openai-compatible", "name": "Scripted",
                    "options": {"baseURL": f"{server.base_url}/v1", "apiKey": KEY},
                    "models": {"m": {"name": "m"}}}  # fmt: skip
        config = json.dumps({"provider": {"scripted": provider}})
        env = {"PATH": f"{binary.parent}:${{PATH}}", "OPENCODE_CONFIG_CONTENT": config}
        matrix = tmp_path / "matrix.yaml"
        matrix.write_text(f"""
name: real-opencode-chat
runs_per_tier: 1
agent: {{preset: opencode, model: scripted/m, timeout_s: 180, env: {json.dumps(env)}}}
tiers: [{{id: opencode}}]
{SCENARIO}""")
        start_worker(concurrency=1)
        submitted = submit(matrix, fleet_env)
        served = [r for r in server.model_requests() if r.body and r.body.get("tools")]
    assert submitted.returncode == 0, submitted.stderr
    (run,) = store.results.all(json.loads(submitted.stdout)["experiment"]["id"])
    assert run.status == RunStatus.completed and run.passed, run.fail_reason
    assert [(r.protocol, r.stream, r.turn) for r in served] == [
        ("openai-chat", True, 0), ("openai-chat", True, 1)
    ]  # fmt: skip
    assert (run.input_tokens, run.output_tokens, len(run.llm_calls)) == (2200, 60, 2)


@pytest.mark.integration
def test_real_opencodes_unknown_model_is_named_from_its_log_in_show_and_preflight(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    """The model id README's example had (anthropic/claude-sonnet-4), which OpenCode's
    bundled catalog lacks offline: its stdout says only "Unexpected server error";
    its log (on stderr, from the preset's --print-logs) names the model and what it
    has instead, and that is the run's reason and preflight's problem."""
    binary = Path(cli_path("opencode"))
    with ModelServer(script_for(CASES[3])) as server:
        env = {"PATH": f"{binary.parent}:${{PATH}}",
               "ANTHROPIC_BASE_URL": f"{server.base_url}/v1"}  # fmt: skip
        matrix = tmp_path / "matrix.yaml"
        matrix.write_text(f"""
name: real-opencode-unknown-model
runs_per_tier: 1
max_attempts: 1
agent: {{preset: opencode, model: anthropic/claude-sonnet-4, timeout_s: 120,
         api_key_env: ANTHROPIC_API_KEY, env: {json.dumps(env)}}}
tiers: [{{id: opencode}}]
{SCENARIO}""")
        start_worker(extra_env={"ANTHROPIC_API_KEY": KEY}, concurrency=1)
        submitted = submit(matrix, fleet_env)
        checked = run_cli("preflight", str(matrix), env={**fleet_env, "ANTHROPIC_API_KEY": KEY})
    (run,) = store.results.all(json.loads(submitted.stdout)["experiment"]["id"])
    assert run.status == RunStatus.agent_error, (run.status, run.fail_reason)
    shown = run_cli("show", run.run_id, env={**fleet_env, "COLUMNS": "400"})
    assert shown.returncode == 0, shown.stderr
    actionable = (
        "Model not found: anthropic/claude-sonnet-4. Did you mean: claude-sonnet-4-6, "
        "claude-sonnet-4-5"
    )
    reason = next(line for line in shown.stdout.splitlines() if line.startswith("reason: "))
    assert actionable in reason and "Unexpected server error" not in reason, reason
    assert "SessionPrompt" not in reason  # the log's stack trace stays in the evidence
    assert checked.returncode == 2
    assert actionable in checked.stderr, checked.stderr
