"""Adaptive runs and per-scenario run counts through the CLI with real workers.

Agents pass or fail as scripted by tier: against an always-failing baseline, a tier
that always passes is decided better early; a tier identical to the baseline runs
(with the baseline) to its max. Where each stops is checked against a simulation of
the same procedure (core.analysis.sequential, tests.support.sequential).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.analysis.sequential import PROCEDURE
from core.matrix import AdaptiveRuns, StopWhen
from core.results.run import RunStatus
from core.store import Store
from tests.conftest import StartWorker, run_cli, shared_with_agents
from tests.support.sequential import deterministic

pytestmark = pytest.mark.integration

MIN, MAX = 5, 20
# Tier `better` leaves what the gate checks for; the baseline B and `same` do not.
AGENT = (
    'echo "$EVALFLEET_TIER $EVALFLEET_SCENARIO" >> {log}; '
    '[ "$EVALFLEET_TIER" != better ] || touch out.txt'
)


def adaptive_matrix(folder: Path, log: Path) -> Path:
    path = folder / "matrix.yaml"
    path.write_text(f"""
name: adaptive
runs_per_tier: {{min: {MIN}, max: {MAX}, until: {{decided: true}}}}
baseline: B
agent: {{kind: command, command: {json.dumps(AGENT.format(log=log))}}}
tiers: [{{id: B}}, {{id: better}}, {{id: same}}]
scenarios:
  - id: s
    prompt: go
    evaluation: {{gates: [{{type: file_exists, path: out.txt}}]}}
  - id: fixed
    runs: 3
    prompt: go
    evaluation: {{gates: [{{type: file_exists, path: out.txt}}]}}
""")
    return path


def test_an_adaptive_experiment_stops_a_far_better_tier_early_and_runs_an_identical_one_to_max(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    log = shared_with_agents(tmp_path / "executions")
    matrix = adaptive_matrix(tmp_path, log)
    validated = run_cli("validate", str(matrix), env=fleet_env)
    assert validated.returncode == 0, validated.stderr
    assert (
        f"3 tiers x 2 scenarios x {MIN} to {MAX} runs (adaptive, waves of {MIN}) (fixed: 3 runs)"
        f" = {3 * (MAX + 3)} runs at most" in validated.stdout
    )

    for _ in range(2):
        start_worker(concurrency=2)
    submitted = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert submitted.returncode == 0, submitted.stderr
    report = json.loads(submitted.stdout)
    exp_id = report["experiment"]["id"]

    rule = AdaptiveRuns(min=MIN, max=MAX, until=StopWhen(decided=True))
    expected = deterministic(rule, {"B": False, "better": True, "same": False})
    assert expected["better"][0] < MAX and expected["same"][0] == MAX  # what the simulation says
    stops = report["adaptive"]["cells"]
    assert {tier: (c["s"]["runs"], c["s"]["reason"]) for tier, c in stops.items()} == expected
    assert report["adaptive"]["procedure"] == PROCEDURE

    # Each run ran once, and the per-scenario count held for every tier.
    executed = log.read_text().splitlines()
    for tier, (runs, _) in expected.items():
        assert executed.count(f"{tier} s") == runs
        assert executed.count(f"{tier} fixed") == 3
        assert report["tiers"][tier]["scenarios"]["s"]["counted"] == runs
        assert report["tiers"][tier]["scenarios"]["fixed"]["counted"] == 3
    total = sum(runs for runs, _ in expected.values()) + 3 * 3
    assert (report["experiment"]["total_runs"], report["experiment"]["completed_runs"]) == (
        total,
        total,
    )
    assert report["experiment"]["status"] == "complete"
    assert all(r.status is RunStatus.completed for r in store.results.all(exp_id))
    indices = sorted(
        r.run_index for r in store.results.all(exp_id) if (r.tier, r.scenario) == ("better", "s")
    )
    assert indices == list(range(expected["better"][0]))

    markdown = run_cli("report", exp_id, "--format", "markdown", env=fleet_env).stdout
    assert "## Adaptive runs: where each tier x scenario stopped" in markdown
    assert "| better | s | 10 | decided: better than the baseline |" in markdown
    assert f"procedure: {PROCEDURE}" in markdown


def test_a_fixed_runs_per_tier_sends_every_run_at_once(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """`runs_per_tier: 4` is what it always was: no waves, no adaptive section."""
    start_worker(concurrency=2)
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        "name: fixed\nruns_per_tier: 4\nagent: {kind: command, command: 'touch out.txt'}\n"
        "tiers: [{id: T0}]\nscenarios: [{id: s, prompt: go}, {id: more, prompt: go, runs: 6}]\n"
    )
    submitted = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert submitted.returncode == 0, submitted.stderr
    report = json.loads(submitted.stdout)
    assert report["adaptive"] is None and report["budget"] is None
    assert report["experiment"]["total_runs"] == 10
    cells = report["tiers"]["T0"]["scenarios"]
    assert (cells["s"]["counted"], cells["more"]["counted"]) == (4, 6)


def test_a_budget_that_runs_out_mid_experiment_closes_every_open_cell(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """Waves stop with the budget: the experiment completes with the runs that fitted,
    instead of waiting for waves that could never run."""
    start_worker(concurrency=2)
    # Every run costs $1 (1M input tokens at $1/1M); a width of 0.01 is never reached.
    event = '{"type":"llm_call","input_tokens":1000000,"output_tokens":0}'
    agent = f"touch out.txt; echo '{event}' > \"$EVALFLEET_EVENTS\""
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(f"""
name: adaptive-budget
runs_per_tier: {{min: 3, max: 10, until: {{width: 0.01}}}}
budget: {{agent_usd: 8, prior_usd: 1}}
pricing: {{m: {{input: 1.0, output: 1.0}}}}
agent: {{kind: command, model: m, command: {json.dumps(agent)}}}
tiers: [{{id: T0}}, {{id: T1}}]
scenarios: [{{id: s, prompt: go}}]
""")
    submitted = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert submitted.returncode == 0, submitted.stderr
    report = json.loads(submitted.stdout)
    runs = store.results.all(report["experiment"]["id"])
    ran = [r for r in runs if r.status is RunStatus.completed]
    assert len(ran) == 8  # exact: every projection is right, so the budget holds exactly
    assert len(runs) == 12  # two waves of 3 per tier, the second's last 4 not run
    assert report["experiment"]["not_run"] == 4
    assert report["budget"]["notice"] == "budget reached: $8.00 of $8.00 spent, 4 runs not run"
    reasons = {c["s"]["reason"] for c in report["adaptive"]["cells"].values()}
    assert reasons == {"budget reached: no further runs"}


@pytest.mark.parametrize(
    ("fragment", "problem"),
    [
        (
            "runs_per_tier: {min: 8, max: 4, until: {decided: true}}",
            "matrix.yaml:2:16: runs_per_tier: min (8) must not be above max (4)",
        ),
        (
            "runs_per_tier: {min: 2, max: 4, until: {}}",
            "runs_per_tier.until: `until` needs `width: W` or `decided: true`",
        ),
        ("runs_per_tier: 0", "matrix.yaml:2:16: runs_per_tier: Input should be greater"),
        ("budget: {prior_usd: 1}", "matrix.yaml:2:9: budget: `budget` needs `agent_usd`"),
        ("budget: {agent_usd: -3}", "budget.agent_usd: Input should be greater than 0"),
    ],
)
def test_a_bad_budget_or_adaptive_count_is_refused_naming_its_place(
    tmp_path: Path, fragment: str, problem: str
) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        f"name: bad\n{fragment}\nagent: {{kind: command, command: 'true'}}\n"
        "tiers: [{id: T0}]\nscenarios: [{id: s, prompt: go}]\n"
    )
    for command in ("validate", "submit"):
        result = run_cli(command, str(matrix), env={"PATH": "/usr/bin:/bin"})
        assert result.returncode == 2
        assert problem in result.stderr.replace("\n", " ")
        assert "1 problem(s); nothing was started" in result.stderr
