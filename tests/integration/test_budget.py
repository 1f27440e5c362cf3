"""The budget guard through the CLI with real workers: an experiment whose budget fits
about 60% of its runs stops within the documented overshoot bound (docs/RELIABILITY.md),
records the rest as not run, says so at the top of every report format, and a resume
with a raised budget runs exactly the runs that were not run.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from core.matrix import Matrix, load_matrix
from core.results.run import RunResult, RunSpec, RunStatus
from core.store import Store
from tests.conftest import StartWorker, run_cli, shared_with_agents
from tests.support.experiments import make_run
from tests.support.terminal import heading_words, table_row

pytestmark = pytest.mark.integration

RUNS = 10
BUDGET = 6.0
WORKERS, SLOTS = 2, 2
# Run i costs 0.8 + 0.05 i dollars: 1M input tokens of model `m` cost $1.
MIN_COST, STEP = 0.8, 0.05
AGENT = (
    'echo "$EVALFLEET_RUN_INDEX" >> {log}; sleep 1; touch out.txt; '
    "tokens=$(( 800000 + 50000 * EVALFLEET_RUN_INDEX )); "
    'echo "{{\\"type\\":\\"llm_call\\",\\"input_tokens\\":$tokens,\\"output_tokens\\":0}}" '
    '> "$EVALFLEET_EVENTS"'
)


def budget_matrix(
    folder: Path, log: Path, budget: str = f"{{agent_usd: {BUDGET}, prior_usd: 1.0}}"
) -> Path:
    path = folder / "matrix.yaml"
    path.write_text(f"""
name: budgeted
runs_per_tier: {RUNS}
budget: {budget}
pricing: {{m: {{input: 1.0, output: 1.0}}}}
agent: {{kind: command, model: m, command: {json.dumps(AGENT.format(log=log))}}}
tiers: [{{id: T0}}]
scenarios:
  - id: s
    prompt: go
    evaluation: {{gates: [{{type: file_exists, path: out.txt}}]}}
""")
    return path


def cost(index: int) -> float:
    return MIN_COST + STEP * index


def test_a_budget_stops_runs_within_the_bound_and_a_raised_budget_runs_the_rest(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    for _ in range(WORKERS):
        start_worker(concurrency=SLOTS)
    log = shared_with_agents(tmp_path / "executions")
    matrix = budget_matrix(tmp_path, log)
    validated = run_cli("validate", str(matrix), env=fleet_env)
    assert "budget: agents $6; a run's cost before its tier x scenario has one: $1" in (
        validated.stdout
    )
    submitted = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert submitted.returncode == 0, submitted.stderr
    report = json.loads(submitted.stdout)
    exp_id = report["experiment"]["id"]

    runs = store.results.all(exp_id)
    ran = [r for r in runs if r.status is RunStatus.completed]
    not_run = [r for r in runs if r.status is RunStatus.not_run]
    assert len(ran) + len(not_run) == RUNS
    # About 60% of the runs fit; the others never started: their agent never ran.
    assert 4 <= len(ran) <= 7 and not_run
    executed = sorted(int(i) for i in log.read_text().split())
    assert executed == sorted(r.run_index for r in ran)
    assert all(r.cost_usd == pytest.approx(cost(r.run_index)) for r in ran)
    assert all("not run: agent budget:" in (r.fail_reason or "") for r in not_run)
    assert all(not r.passed and r.gates == [] for r in not_run)

    # The bound: what the runs in flight at the last admission (at most every slot of
    # the fleet) cost beyond their projection. A projection here is the prior ($1.00)
    # or a mean of finished runs, never below the cheapest run.
    spent = sum(r.cost_usd or 0.0 for r in ran)
    worst_error = cost(RUNS - 1) - MIN_COST
    assert spent <= BUDGET + WORKERS * SLOTS * worst_error
    # ... and it did not stop early: one more run of the cheapest kind would not have fit
    # on top of what was spent and projected.
    assert spent + MIN_COST > BUDGET - WORKERS * SLOTS * worst_error

    # Statistics leave the not-run runs out; they are counted under their own name.
    tier = report["tiers"]["T0"]
    assert (tier["counted"], tier["passes"], tier["not_run"]) == (len(ran), len(ran), len(not_run))
    assert tier["pass_rate"]["count"] == len(ran)
    assert report["experiment"]["not_run"] == len(not_run)
    notice = f"budget reached: ${spent:.2f} of ${BUDGET:.2f} spent, {len(not_run)} runs not run"
    assert report["budget"]["notice"] == notice
    assert next(iter(report)) == "budget"  # the JSON document says it first
    assert notice in submitted.stderr

    # Every format says it at the top; csv, rows only for csv readers, on stderr.
    def fmt(name: str, *more: str) -> str:
        result = run_cli("report", exp_id, "--format", name, *more, env=fleet_env)
        assert result.returncode == 0, result.stderr
        assert (notice in result.stderr) is (name == "csv")
        return result.stdout

    assert fmt("table").splitlines()[0] == notice
    assert fmt("markdown").splitlines()[0] == f"> **{notice}**"
    # A pull request's summary: the verdict line first, the budget right under it.
    assert fmt("github").splitlines()[2] == f"> **{notice}**"
    html = fmt("html")
    assert f'<p class="banner"><strong>{notice}</strong></p><h1>' in html
    text = fmt("csv")
    assert text.endswith("\n") and not text.endswith("\n\n") and "\r" not in text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert {(row["scenario"], row["not_run"]) for row in rows} == {
        ("", str(len(not_run))),
        ("s", str(len(not_run))),
    }
    per_run = list(csv.DictReader(io.StringIO(fmt("csv", "--runs"))))
    assert sum(row["status"] == "not_run" for row in per_run) == len(not_run)
    status = run_cli("status", exp_id, env=fleet_env).stdout
    assert {"not", "run", "(budget)"} <= heading_words(status)
    assert table_row(status, exp_id)[6] == str(len(not_run))  # after the cancelled

    # A resume without a new budget leaves them as they are, and says so.
    same = run_cli("resume", exp_id, env=fleet_env)
    assert same.returncode == 0 and "nothing to resume" in same.stderr
    assert f"{len(not_run)} runs not run for the budget stay so" in same.stderr

    # A raised budget runs exactly the runs that were not run.
    resumed = run_cli(
        "resume", exp_id, "--budget", "20", "--wait", "--format", "json", env=fleet_env
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(not_run)} not run for the budget" in resumed.stderr
    final = json.loads(resumed.stdout)
    assert final["tiers"]["T0"]["counted"] == RUNS and final["experiment"]["not_run"] == 0
    total = sum(cost(i) for i in range(RUNS))
    assert final["budget"]["notice"] == f"budget: ${total:.2f} of $20.00 spent"
    assert sorted(int(i) for i in log.read_text().split()) == list(range(RUNS))


def test_without_a_prior_the_runs_started_unprojected_are_the_overshoot(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """--budget over the file's ceiling; no prior, no limits: the runs that start before
    any has finished are projected at $0, so each may overshoot by its whole cost."""
    for _ in range(WORKERS):
        start_worker(concurrency=SLOTS)
    matrix = budget_matrix(
        tmp_path, shared_with_agents(tmp_path / "executions"), budget="{agent_usd: 1000}"
    )
    submitted = run_cli(
        "submit", str(matrix), "--budget", str(BUDGET), "--wait", "--json", env=fleet_env
    )
    assert submitted.returncode == 0, submitted.stderr
    report = json.loads(submitted.stdout)
    runs = store.results.all(report["experiment"]["id"])
    spent = sum(r.cost_usd or 0.0 for r in runs if r.status is RunStatus.completed)
    not_run = sum(r.status is RunStatus.not_run for r in runs)
    assert not_run > 0
    assert spent <= BUDGET + WORKERS * SLOTS * cost(RUNS - 1)
    assert report["budget"]["agent_usd"] == BUDGET
    assert report["budget"]["notice"] == (
        f"budget reached: ${spent:.2f} of ${BUDGET:.2f} spent, {not_run} runs not run"
    )


def test_an_overshoot_is_seen_in_the_notice_wherever_it_is_printed(
    fleet_env: dict[str, str], start_worker: StartWorker, tmp_path: Path
) -> None:
    """A run projected at $0.25 that cost $0.501258 of a $0.50 budget: the notice read
    "$0.5 of $0.5 spent", as if the budget had been met to the cent."""
    start_worker(concurrency=1)
    agent = (
        "touch out.txt; "
        'echo \'{"type":"llm_call","input_tokens":501258,"output_tokens":0}\' > "$EVALFLEET_EVENTS"'
    )
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(f"""
name: overshot
runs_per_tier: 3
budget: {{agent_usd: 1000, prior_usd: 0.25}}
pricing: {{m: {{input: 1.0, output: 1.0}}}}
agent: {{kind: command, model: m, command: {json.dumps(agent)}}}
tiers: [{{id: T0}}]
scenarios:
  - id: s
    prompt: go
    evaluation: {{gates: [{{type: file_exists, path: out.txt}}]}}
""")
    submitted = run_cli("submit", str(matrix), "--budget", "0.5", "--wait", env=fleet_env)
    assert submitted.returncode == 0, submitted.stderr
    notice = "budget reached: $0.5013 of $0.50 spent, 2 runs not run"
    exp_id, first = submitted.stdout.splitlines()[:2]  # the id, then the report
    assert first == notice
    assert f"{notice}; `scheduler resume {exp_id} --budget USD` runs them" in submitted.stderr
    report = run_cli("report", exp_id, "--format", "json", env=fleet_env)
    assert json.loads(report.stdout)["budget"]["agent_spent_usd"] == pytest.approx(0.501258)
    markdown = run_cli("report", exp_id, "--format", "markdown", env=fleet_env)
    assert markdown.stdout.splitlines()[0] == f"> **{notice}**"
    assert notice in run_cli("report", exp_id, "--format", "csv", env=fleet_env).stderr


def test_resume_with_a_budget_needs_an_experiment_with_one(
    fleet_env: dict[str, str], start_worker: StartWorker, tmp_path: Path
) -> None:
    start_worker(concurrency=1)
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        "name: free\nruns_per_tier: 1\nagent: {kind: command, command: 'touch out.txt'}\n"
        "tiers: [{id: T0}]\nscenarios: [{id: s, prompt: go}]\n"
    )
    submitted = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    exp_id = json.loads(submitted.stdout)["experiment"]["id"]
    resumed = run_cli("resume", exp_id, "--budget", "5", env=fleet_env)
    assert resumed.returncode == 2
    assert "submitted without a budget" in resumed.stderr


# --- the ledger itself, on the session's Redis -------------------------------------------


def _ledger_matrix(tmp_path: Path, budget: str, limits: str = "") -> Matrix:
    path = tmp_path / "ledger.yaml"
    path.write_text(
        f"name: ledger\nbudget: {budget}\nagent: {{kind: command, command: 'true'}}\n"
        f"tiers: [{{id: T0}}, {{id: T1}}]\nscenarios: [{{id: s, prompt: go{limits}}}]\n"
    )
    return load_matrix(path)


def _spec(exp_id: str, tier: str, index: int) -> RunSpec:
    return RunSpec(
        experiment_id=exp_id,
        run_id=f"{exp_id}:{tier}:s:{index}",
        tier=tier,
        scenario="s",
        run_index=index,
    )


def _finished(spec: RunSpec, cost: float | None, judge: float | None = None) -> RunResult:
    return make_run(spec.tier, spec.scenario, spec.run_index, cost=cost).model_copy(
        update={"experiment_id": spec.experiment_id, "run_id": spec.run_id, "judge_cost_usd": judge}
    )


def test_projections_learn_from_finished_runs_of_the_same_cell(
    store: Store, tmp_path: Path
) -> None:
    matrix = _ledger_matrix(tmp_path, "{agent_usd: 10, prior_usd: 2}")
    exp_id = f"ledger-{tmp_path.name}"
    assert matrix.budget is not None
    store.ledger.set_limits(exp_id, matrix.budget)
    first = store.ledger.reserve(_spec(exp_id, "T0", 0), matrix)
    assert (first.fits, first.agent_usd) == (True, 2.0)  # the prior: nothing finished yet
    # A redelivery of the same run holds the same reservation, not a second one.
    assert store.ledger.reserve(_spec(exp_id, "T0", 0), matrix) == first
    assert store.ledger.state(exp_id).reserved["agent"] == 2.0
    assert store.ledger.settle(_finished(_spec(exp_id, "T0", 0), 0.5))
    assert not store.ledger.settle(_finished(_spec(exp_id, "T0", 0), 0.5))  # once only
    # T0's next run projects T0's mean; T1 has no finished run: the prior.
    assert store.ledger.reserve(_spec(exp_id, "T0", 1), matrix).agent_usd == 0.5
    assert store.ledger.reserve(_spec(exp_id, "T1", 0), matrix).agent_usd == 2.0
    state = store.ledger.state(exp_id)
    assert (state.spent["agent"], state.reserved["agent"], state.stopped) == (0.5, 2.5, None)
    # A run that never got to its agent (setup failed) costs nothing and teaches nothing;
    # one whose agent ran at an unknown cost (an unpriced model) is charged its projection.
    failed = _finished(_spec(exp_id, "T1", 0), None).model_copy(
        update={"status": RunStatus.infra_error}
    )
    assert store.ledger.settle(failed)
    assert store.ledger.reserve(_spec(exp_id, "T1", 1), matrix).agent_usd == 2.0
    assert store.ledger.settle(_finished(_spec(exp_id, "T0", 1), None))
    state = store.ledger.state(exp_id)
    assert (state.spent["agent"], state.reserved["agent"]) == (1.0, 2.0)


def test_the_first_run_that_does_not_fit_stops_the_ledger_until_the_limit_is_raised(
    store: Store, tmp_path: Path
) -> None:
    # No prior: the run's own cost limit projects it before anything has finished.
    matrix = _ledger_matrix(
        tmp_path,
        "{agent_usd: 3, judge_usd: 1, judge_prior_usd: 0.6}",
        ", limits: {max_cost_usd: 2}",
    )
    exp_id = f"ledger-{tmp_path.name}"
    assert matrix.budget is not None
    store.ledger.set_limits(exp_id, matrix.budget)
    held = store.ledger.reserve(_spec(exp_id, "T0", 0), matrix)
    assert (held.agent_usd, held.judge_usd) == (2.0, 0.6)
    # $2 + $2 > $3 for the agent: refused, and so is everything after, even what would fit.
    refused = store.ledger.reserve(_spec(exp_id, "T0", 1), matrix)
    assert not refused.fits
    assert refused.refused == (
        "agent budget: $0.0000 spent + $2.0000 reserved by runs in flight + $2.0000 projected "
        "for this run > $3.0000"
    )
    store.ledger.settle(_finished(_spec(exp_id, "T0", 0), 0.25, judge=0.5))
    assert not store.ledger.reserve(_spec(exp_id, "T1", 0), matrix).fits
    state = store.ledger.state(exp_id)
    assert (state.spent, state.reserved) == (
        {"agent": 0.25, "judge": 0.5},
        {"agent": 0.0, "judge": 0.0},
    )
    # A raised limit starts it again; the judge's ceiling is checked on its own.
    raised = {"agent_usd": 100.0, "judge_usd": 1.2}
    store.ledger.set_limits(exp_id, matrix.budget.model_copy(update=raised))
    assert store.ledger.reserve(_spec(exp_id, "T1", 0), matrix).fits
    judge_bound = store.ledger.reserve(_spec(exp_id, "T1", 1), matrix)
    assert not judge_bound.fits and (judge_bound.refused or "").startswith("judge budget:")
