"""Every recorded outcome means what a reader takes it to mean, through the CLI and
real workers: a run that did not finish never passes, an agent that cannot start
is an infrastructure error (and stops its tier early), and a cancelled run is
never reported as one that ran.
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.results.run import NO_USAGE, NOT_RUN_NOTE, UNREAD_TRANSCRIPT, RunStatus
from core.store import Store
from tests.conftest import PREFIX, ROOT, StartWorker, run_cli, shared_with_agents, start_cli
from tests.support.experiments import command_matrix
from tests.support.fleet import wait_until
from tests.support.terminal import table_row

pytestmark = pytest.mark.integration

# Writes what its gate checks for, then does not finish by itself.
HANGS_AFTER_WORK = "touch out.txt; sleep 300"
FAILS_AFTER_WORK = "touch out.txt; echo 'gave up' >&2; exit 1"


def submit(matrix: Path, env: dict[str, str], *extra: str) -> tuple[int, dict, str]:
    result = run_cli("submit", str(matrix), "--wait", "--json", *extra, env=env)
    return result.returncode, json.loads(result.stdout, parse_constant=_refuse), result.stderr


def _refuse(constant: str) -> None:
    raise AssertionError(f"not strict JSON: bare {constant}")


@pytest.mark.parametrize(
    ("command", "status", "reason"),
    [
        (HANGS_AFTER_WORK, RunStatus.timeout, "agent timed out"),
        (FAILS_AFTER_WORK, RunStatus.agent_error, "agent exited with code 1: gave up"),
    ],
)
def test_an_agent_that_did_not_finish_never_passes_even_when_its_gates_do(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
    command: str,
    status: RunStatus,
    reason: str,
) -> None:
    start_worker(concurrency=2)
    matrix = command_matrix(tmp_path, command, runs=2, timeout_s=2)
    code, report, stderr = submit(matrix, fleet_env, "--json-nonfinite", "null")
    assert code == 0, stderr  # a real, failed result: not an infrastructure error
    # No pass: an infinite cost of a pass, written as null for strict JSON readers.
    assert report["tiers"]["T0"]["cost_of_pass"] is None
    exp_id = report["experiment"]["id"]

    runs = store.results.all(exp_id)
    assert [(r.status, r.passed, r.gates_passed, r.gates_total) for r in runs] == [
        (status, False, 1, 1)
    ] * 2
    assert all(reason in (r.fail_reason or "") for r in runs)
    tier = report["tiers"]["T0"]
    assert (tier["counted"], tier["passes"], tier["errors"]) == (2, 0, 0)
    assert tier["pass_rate"]["max"] == 0.0

    # Every format says 0 passes.
    with_runs = json.loads(_report(exp_id, "json", fleet_env, "--runs"))
    assert with_runs["tiers"]["T0"]["cost_of_pass"] == "Infinity"  # DESIGN's default
    assert [(r["status"], r["passed"]) for r in with_runs["runs"]] == [(status.value, False)] * 2
    rows = list(csv.DictReader(io.StringIO(_report(exp_id, "csv", fleet_env))))
    assert {(row["scenario"], row["passes"]) for row in rows} == {("", "0"), ("s", "0")}
    for fmt in ("markdown", "table", "html"):
        assert "2 counted, 0 passed, 0 infrastructure errors" in _report(exp_id, fmt, fleet_env)


def _report(exp_id: str, fmt: str, env: dict[str, str], *extra: str) -> str:
    result = run_cli("report", exp_id, "--format", fmt, *extra, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_missing_agent_script_is_an_infrastructure_error_that_stops_its_tier(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    """The agent misnamed: bash cannot find it (exit 127). Nothing is scored, the
    tier stops after its first 3 runs, and submit says why and exits 3."""
    start_worker(concurrency=1)
    matrix = command_matrix(tmp_path, "./agnet.sh", runs=8, extra="fail_fast: 3")
    code, report, stderr = submit(matrix, fleet_env)

    assert code == 3, stderr
    runs = store.results.all(report["experiment"]["id"])
    assert len(runs) == 8
    assert all(r.status == RunStatus.infra_error and not r.passed for r in runs)
    assert all(r.gates == [] and r.judge is None for r in runs)  # nothing was gated
    # Nor credited: an empty gate list is no implementation.
    assert {(r.impl_rate, r.composite_score, r.pass_rate) for r in runs} == {(0.0, 0.0, 0.0)}
    reason = "agent could not start (exit 127): bash: line 1: ./agnet.sh: No such file or directory"
    started = [r for r in runs if r.fail_reason == reason]
    not_run = [r for r in runs if r.fail_reason == reason + NOT_RUN_NOTE]
    # One worker slot: exactly the first three ran before the tier was stopped.
    assert (len(started), len(not_run)) == (3, 5)

    tier = report["tiers"]["T0"]
    assert (tier["errors"], tier["counted"], tier["passes"]) == (8, 0, 0)
    assert tier["grade"] is None and tier["pass_rate"]["count"] == 0
    assert report["error_reasons"] == {reason: 8}
    assert report["experiment"]["errors"] == 8
    # The follower says so at once, with the failing command; the last line names the reason.
    assert (
        "tier T0 stopped: its first 3 runs all ended with the same infrastructure error, so "
        "its other runs are not run."
    ) in " ".join(stderr.split())
    assert "agent: ./agnet.sh" in stderr
    assert stderr.strip().splitlines()[-2] == (
        f"8 of 8 runs were infrastructure errors, kept out of the statistics; most common (8): "
        f"{reason}"
    )
    # A run fail-fast kept from starting shows no agent's time or cost.
    shown = run_cli("show", not_run[0].run_id, env=fleet_env).stdout
    assert shown.splitlines()[1] == "outcome: infra_error, not counted in the statistics"
    assert f"index {not_run[0].run_index} · no agent result" in shown
    # The reports name it too.
    markdown = _report(report["experiment"]["id"], "markdown", fleet_env)
    assert f"infrastructure error (8 runs): {reason}" in markdown
    # The experiment's status says it too: complete, 8 infrastructure errors.
    exp_id = report["experiment"]["id"]
    listed = run_cli("status", exp_id, env=fleet_env)
    assert table_row(listed.stdout, exp_id)[1:5] == ["complete", "8/8", "0", "8"]


def test_infrastructure_errors_run_again_on_a_resume_that_asks_once_their_cause_is_mended(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """An agent's program not installed yet: every run an infrastructure error, most of
    them stopped by fail-fast. `resume` alone has nothing to send and says what would;
    with --retry-errors, once the program is there, those runs run again, fail-fast
    starting afresh, and each is now what its agent earned."""
    start_worker(concurrency=1)
    tools = shared_with_agents(tmp_path / "tools", folder=True)
    tools.chmod(0o755)  # read and run by the runs' users, written by the test alone
    program = tools / "agent-tool"
    matrix = command_matrix(tmp_path / "m", f"{program} && touch out.txt", runs=5)
    matrix.write_text(matrix.read_text() + "fail_fast: 2\n")
    code, report, stderr = submit(matrix, fleet_env)
    exp_id = report["experiment"]["id"]
    assert code == 3 and report["experiment"]["errors"] == 5
    assert stderr.strip().splitlines()[-1] == (
        f"once the cause is mended, `scheduler resume {exp_id} --retry-errors` runs them again "
        "(with the files as submitted: a fix in the matrix folder needs a new submit)"
    )
    assert "T0" in store.health.halted(exp_id)
    # Its 5 runs were more than the 2 that stopped it; a tier of exactly 2 has no others.
    assert "same infrastructure error, so its other runs are not run." in " ".join(stderr.split())

    same = run_cli("resume", exp_id, env=fleet_env)
    assert same.returncode == 0, same.stderr
    assert (
        "every run has a result; nothing to resume; 5 runs ended in an infrastructure error: "
        f"`scheduler resume {exp_id} --retry-errors` runs them again once the cause is mended "
        "(with the files as submitted"
    ) in " ".join(same.stderr.split())

    # The run's last word decides: one run fails on its own, the others pass.
    program.write_text('#!/bin/sh\n[ "$EVALFLEET_RUN_INDEX" != 3 ]\n')
    program.chmod(0o755)
    again = run_cli("resume", exp_id, "--retry-errors", "--wait", "--format", "json", env=fleet_env)
    assert again.returncode == 0, again.stderr
    assert "re-sending 5 runs: 0 cancelled before they started, 5 infrastructure errors" in (
        again.stderr
    )
    final = json.loads(again.stdout)
    assert (final["experiment"]["errors"], final["tiers"]["T0"]["counted"]) == (0, 5)
    runs = {r.run_index: r for r in store.results.all(exp_id)}
    assert {i: (r.status, r.passed) for i, r in runs.items()} == {
        **{i: (RunStatus.completed, True) for i in (0, 1, 2, 4)},
        3: (RunStatus.agent_error, False),
    }
    assert store.health.halted(exp_id) == {}
    # A run that ran once more is one delivery, not two: its count started again.
    assert {len(store.attempts.of(exp_id, r.run_id)) for r in runs.values()} == {1}


def test_fail_fast_leaves_a_tier_alone_once_it_has_a_result_of_its_own(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    """Runs 0 and 1 work, the rest cannot start: a flaky set-up is reported, not cut short."""
    start_worker(concurrency=1)
    command = '[ "$EVALFLEET_RUN_INDEX" -lt 2 ] && touch out.txt || ./missing.sh'
    matrix = command_matrix(tmp_path, command, runs=6, extra="fail_fast: 2")
    code, report, _ = submit(matrix, fleet_env)
    assert code == 3
    runs = store.results.all(report["experiment"]["id"])
    assert [r.status for r in runs] == [RunStatus.completed] * 2 + [RunStatus.infra_error] * 4
    assert not any(NOT_RUN_NOTE in (r.fail_reason or "") for r in runs)
    assert report["tiers"]["T0"]["counted"] == 2 and report["tiers"]["T0"]["passes"] == 2


def test_fail_fast_leaves_a_tier_alone_whose_scenarios_fail_each_its_own_way(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    """One scenario's setup fails, the other's agent cannot start: not one breakage of
    the tier's, so it is not stopped, and no run is recorded with the other's error."""
    start_worker(concurrency=1)
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("""
name: two-ways
runs_per_tier: 3
fail_fast: 2
agent: {kind: command, command: ./missing.sh, timeout_s: 30}
tiers: [{id: T0}]
scenarios:
  - {id: broken-setup, prompt: go, setup: ["exit 3"]}
  - {id: no-agent, prompt: go}
""")
    code, report, stderr = submit(matrix, fleet_env)
    assert code == 3, stderr
    runs = store.results.all(report["experiment"]["id"])
    reasons = {(r.scenario, (r.fail_reason or "").split(":")[0]) for r in runs}
    assert reasons == {
        ("broken-setup", "setup command 'exit 3' failed"),
        ("no-agent", "agent could not start (exit 127)"),
    }
    # `exit 3` printed nothing: no colon dangles after its exit code.
    assert {r.fail_reason for r in runs if r.scenario == "broken-setup"} == {
        "setup command 'exit 3' failed: exit code 3"
    }
    assert len(runs) == 6 and not any(NOT_RUN_NOTE in (r.fail_reason or "") for r in runs)
    assert "stopped" not in stderr


def _logged_submit(
    tmp_path: Path, fleet_env: dict[str, str], command: str, runs: int
) -> tuple[Path, str]:
    """A fleet submit of `runs` runs, no worker started yet, whose agents each log their
    index to the file returned, then run `command`; and the experiment's id."""
    executions = shared_with_agents(tmp_path / "executions")
    logged = f"echo $EVALFLEET_RUN_INDEX >> {executions}; {command}"
    submitted = run_cli("submit", str(command_matrix(tmp_path, logged, runs=runs)), env=fleet_env)
    assert submitted.returncode == 0, submitted.stderr
    return executions, submitted.stdout.strip()


def test_cancel_then_resume_runs_exactly_the_cancelled_runs(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    executions, exp_id = _logged_submit(tmp_path, fleet_env, "touch out.txt", runs=6)
    # Two runs finish before the cancel, as if a worker had taken them.
    from worker.run import execute

    for spec in store.specs.all(exp_id)[:2]:
        assert execute(spec, store).passed
    assert run_cli("cancel", exp_id, env=fleet_env).returncode == 0
    start_worker(concurrency=2)
    wait_until(lambda: store.reports.get(exp_id), "the cancelled experiment's report", timeout=90)

    cancelled = run_cli("status", exp_id, env=fleet_env).stdout
    # status, runs ran, passed, infrastructure errors, cancelled
    assert table_row(cancelled, exp_id)[1:6] == ["cancelled", "2/6", "2", "0", "4"]
    listed = run_cli("list", env=fleet_env).stdout
    assert table_row(listed, exp_id)[1] == "cancelled"
    # Each starts at its header: an untitled table has no title line, not a blank one.
    assert cancelled.splitlines()[0].split()[:2] == ["experiment", "status"]
    assert listed.splitlines()[0].strip() and "experiment" in "".join(listed.splitlines()[:2])
    # A cancelled run is neither a pass nor a failure, and shows no agent's time or cost.
    unrun = next(r for r in store.results.all(exp_id) if r.status == RunStatus.cancelled)
    shown = run_cli("show", unrun.run_id, env=fleet_env).stdout.splitlines()
    assert shown[1] == "outcome: cancelled, not counted in the statistics"
    assert f"index {unrun.run_index} · no agent result · worker " in shown[3]

    resumed = run_cli("resume", exp_id, "--wait", "--format", "json", env=fleet_env)
    assert resumed.returncode == 0, resumed.stderr
    assert "re-sending 4 runs: 4 cancelled before they started, 0 with no result" in (
        resumed.stderr
    )
    report = json.loads(resumed.stdout)
    assert report["experiment"]["status"] == "complete"
    assert (report["experiment"]["cancelled"], report["experiment"]["errors"]) == (0, 0)
    assert report["tiers"]["T0"]["counted"] == 6 and report["tiers"]["T0"]["passes"] == 6
    # Every run ran exactly once: the two before the cancel were not run again.
    assert sorted(executions.read_text().split()) == [str(i) for i in range(6)]
    assert all(r.status == RunStatus.completed for r in store.results.all(exp_id))

    again = run_cli("resume", exp_id, env=fleet_env)
    assert again.returncode == 0 and "nothing to resume" in again.stderr


def test_a_submit_whose_experiment_is_cancelled_from_elsewhere_exits_4_naming_the_resume(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """A CI job following its experiment must not go green on runs that never ran: the
    submit prints the report, says how many runs did not, and exits 4. The cancel
    itself, which asked for it, exits 0."""
    start_worker(concurrency=1)
    started = shared_with_agents(tmp_path / "started")
    matrix = command_matrix(
        tmp_path / "m", f"echo x >> {started}; sleep 1; touch out.txt", runs=5, timeout_s=30
    )
    follower = start_cli("submit", str(matrix), "--wait", env=fleet_env)
    assert follower.stdout is not None
    exp_id = follower.stdout.readline().strip()  # the id first, the report at the end
    wait_until(lambda: started.read_text(), "the first run's agent", timeout=60)
    cancelled = run_cli("cancel", exp_id, env=fleet_env)
    assert cancelled.returncode == 0, cancelled.stderr
    _, stderr = follower.communicate(timeout=120)
    assert follower.returncode == 4, stderr
    info = store.experiments.info(exp_id)
    assert info.cancelled >= 3 and info.completed_runs == 5
    assert stderr.strip().splitlines()[-1] == (
        f"experiment {exp_id} was cancelled: {info.cancelled} runs of 5 did not run; "
        f"`scheduler resume {exp_id}` runs them"
    )


# One delivery of a run, as a worker's pool process runs it, in a process of its own.
_DELIVERY = (
    "import sys; from core.store import Store; from core.results.run import RunSpec; "
    "from worker.run import execute; "
    "store = Store.from_url(sys.argv[1], prefix=sys.argv[2]); "
    "execute(RunSpec.model_validate_json(sys.argv[3]), store)"
)


def test_a_run_cancelled_after_its_delivery_was_cut_short_is_not_said_to_be_unstarted(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    redis_url: str,
    tmp_path: Path,
) -> None:
    """Run 0's first delivery dies with its agent halfway (a worker killed, a submit
    interrupted past its grace); the experiment is then cancelled. Every run is
    recorded cancelled, none runs again, and run 0's reason says it was interrupted,
    not that it never started."""
    executions, exp_id = _logged_submit(tmp_path, fleet_env, "sleep 60; touch out.txt", runs=3)
    first = store.specs.all(exp_id)[0]
    delivery = subprocess.Popen(
        [sys.executable, "-c", _DELIVERY, redis_url, PREFIX, first.model_dump_json()],
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        wait_until(lambda: executions.read_text().split() == ["0"], "run 0's agent to start")
    finally:
        os.killpg(delivery.pid, signal.SIGKILL)
        delivery.wait()
    assert run_cli("cancel", exp_id, env=fleet_env).returncode == 0
    start_worker(concurrency=2)
    wait_until(lambda: store.reports.get(exp_id), "the cancelled experiment's report", timeout=90)

    runs = {r.run_index: r for r in store.results.all(exp_id)}
    assert {i: (r.status, r.attempts) for i, r in runs.items()} == {
        0: (RunStatus.cancelled, 2),
        1: (RunStatus.cancelled, 1),
        2: (RunStatus.cancelled, 1),
    }
    assert runs[0].fail_reason == (
        "experiment cancelled after this run was interrupted (its earlier delivery did not "
        "finish): not run again"
    )
    assert {runs[i].fail_reason for i in (1, 2)} == {"experiment cancelled before this run started"}
    assert executions.read_text().split() == ["0"]  # nothing ran after the cancel


def test_a_resume_with_nothing_to_send_changes_nothing(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    """A cancel that came too late (every run had finished) leaves a cancelled
    experiment that resume must not turn into a complete one it never re-ran."""
    start_worker(concurrency=2)
    _, report, _ = submit(command_matrix(tmp_path, "touch out.txt", runs=2), fleet_env)
    exp_id = report["experiment"]["id"]
    assert run_cli("cancel", exp_id, env=fleet_env).returncode == 0
    before = store.experiments.info(exp_id)
    resumed = run_cli("resume", exp_id, env=fleet_env)
    assert resumed.returncode == 0 and "nothing to resume" in resumed.stderr
    time.sleep(1)
    assert store.experiments.info(exp_id) == before


def test_status_says_when_no_worker_takes_the_experiments_runs(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    """ "running 0/2" alone reads as slow progress; the runs' queue has no consumer."""
    from tests.conftest import QUEUE

    idle_queue = f"{QUEUE}-idle"
    matrix = command_matrix(tmp_path, "touch out.txt", runs=2, extra=f"queue: {idle_queue}")
    submitted = run_cli("submit", str(matrix), env=fleet_env)
    exp_id = submitted.stdout.strip()
    status = run_cli("status", exp_id, env=fleet_env)
    assert status.returncode == 0
    assert table_row(status.stdout, exp_id)[2] == "0/2"
    assert f"no worker is taking runs from queue {idle_queue}" in status.stderr
    # As printed it runs: the broker of EVALFLEET_BROKER_URL is the next command's too.
    said = " ".join(status.stderr.split())
    assert f"`scheduler worker --queues {idle_queue}`" in said, said

    start_worker(concurrency=1, queues=idle_queue)
    wait_until(lambda: store.reports.get(exp_id), "the report once a worker takes the runs")
    done = run_cli("status", exp_id, env=fleet_env)
    assert table_row(done.stdout, exp_id)[1] == "complete" and "no worker" not in done.stderr


def test_a_waited_csv_submit_prints_rows_only_and_the_id_aside(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """`submit --broker ... --wait --format csv` is piped into csv readers: the
    experiment id goes to stderr, not above the header."""
    start_worker(concurrency=2)
    matrix = command_matrix(tmp_path, "touch out.txt", runs=2)
    result = run_cli("submit", str(matrix), "--wait", "--format", "csv", env=fleet_env)
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [(r["tier"], r["scenario"], r["passes"]) for r in rows] == [
        ("T0", "", "2"),
        ("T0", "s", "2"),
    ]
    # The id is a line of its own (after any warning about the broker's settings).
    exp_id = next(line for line in result.stderr.splitlines() if line.startswith("t-"))
    assert exp_id not in result.stdout
    # Without --wait the id is all there is to print: on stdout, for $(...).
    quiet = run_cli("submit", str(matrix), "--format", "csv", env=fleet_env)
    assert quiet.returncode == 0 and quiet.stdout.strip().startswith("t-"), quiet.stderr
    wait_until(lambda: store.reports.get(quiet.stdout.strip()), "its runs done")  # no leftovers


def test_a_transcript_nothing_of_which_could_be_read_leaves_the_cost_unknown_not_zero(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """An agent that wrote its events file, of which not one line could be read, may
    have spent anything: its cost is unknown, and the report's hint is to look at its
    transcript, not to add a price. An agent without a model that wrote nothing (a
    script) spent nothing: $0."""
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("""
name: unread
runs_per_tier: 1
agent: {kind: command, command: "touch out.txt", timeout_s: 30}
tiers:
  - {id: silent}
  - id: garbled
    agent: {command: 'echo "spent a lot" > "$EVALFLEET_EVENTS"; touch out.txt',
            model: claude-sonnet-4}
scenarios:
  - {id: s, prompt: go, evaluation: {gates: [{type: file_exists, path: out.txt}]}}
""")
    start_worker(concurrency=2)
    code, report, _ = submit(matrix, fleet_env)
    assert code == 0
    runs = {r.tier: r for r in store.results.all(report["experiment"]["id"])}
    assert (runs["silent"].cost_usd, runs["silent"].cost_unknown_reason) == (0.0, None)
    assert runs["garbled"].cost_usd is None and runs["garbled"].passed
    assert runs["garbled"].cost_unknown_reason == UNREAD_TRANSCRIPT
    assert (report["tiers"]["garbled"]["cost_unknown_runs"], report["tiers"]["garbled"][
        "cost_unread_runs"]) == (1, 1)  # fmt: skip
    full = run_cli("report", report["experiment"]["id"], "--full", env=fleet_env).stdout
    said = " ".join(full.split())
    garbled = runs["garbled"].run_id
    assert report["tiers"]["garbled"]["cost_unread_run"] == garbled
    assert (
        "cost unknown for 1 run (the transcript of 1 run could not be read (no line of it in "
        "its format with figures that are numbers), so what it spent is unknown: `scheduler "
        f"show {garbled}` shows its output)"
    ) in said
    assert "add each model's price" not in said
    # The HTML chart of cost against score has no point for it: its caption says why.
    html = run_cli("report", report["experiment"]["id"], "--format", "html", env=fleet_env)
    chart = html.stdout.split('id="cost-composite"', 1)[1].split("</figure>", 1)[0]
    assert 'data-label="silent"' in chart and 'data-label="garbled"' not in chart
    assert "not shown: garbled: cost unknown" in chart
    shown = run_cli("show", runs["garbled"].run_id, env=fleet_env).stdout
    assert f"cost unknown: {UNREAD_TRANSCRIPT}" in " ".join(shown.split())


def test_an_agent_with_a_model_whose_transcript_recorded_no_usage_has_an_unknown_cost(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """A plain transcript cannot carry usage, and an events-jsonl agent may write no
    llm_call: an agent with a model whose transcript recorded none spent an unknown
    amount, priced model or not. Such runs were $0.0000 and the best value; now their
    cost is unknown everywhere (JSON, text, notes), the unpriced model named, and the
    budget ledger charges each its projection rather than nothing."""
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("""
name: plaincost
runs_per_tier: 2
budget: {agent_usd: 10, prior_usd: 0.25}
agent:
  kind: command
  command: 'echo "$ my-tool create x"; echo "I created the note"; touch out.txt'
  transcript: plain
  model: claude-sonnet-4
  timeout_s: 30
tiers:
  - id: P
  - id: Q
    agent: {model: my-unpriced-model}
  - id: E
    agent: {transcript: events-jsonl, command: "touch out.txt"}
scenarios:
  - id: s1
    prompt: "write out.txt"
    target: {command_pattern: 'my-tool\\s+(\\S+)'}
    evaluation: {gates: [{type: file_exists, path: out.txt}]}
""")
    start_worker(concurrency=2)
    code, report, stderr = submit(matrix, fleet_env)
    assert code == 0, stderr
    said = " ".join(stderr.split())
    assert "model 'my-unpriced-model' has no price" in said
    assert (
        "tiers P, Q: the agent has a model but a plain transcript, which records no token "
        "usage, so their runs' cost and cost of pass will be unknown (not $0)"
    ) in said
    exp_id = report["experiment"]["id"]
    runs = store.results.all(exp_id)
    assert len(runs) == 6 and all(r.passed and r.cost_usd is None for r in runs)
    reasons = {r.tier: r.cost_unknown_reason for r in runs}
    assert reasons["P"] == reasons["E"] == NO_USAGE
    assert reasons["Q"] == f"{NO_USAGE}; nor has model 'my-unpriced-model' a price"
    tiers = report["tiers"]
    for tier in ("P", "Q", "E"):
        assert tiers[tier]["cost_unknown_runs"] == tiers[tier]["cost_unrecorded_runs"] == 2
        assert tiers[tier]["cost_of_pass"] is None and tiers[tier]["cost_usd"]["count"] == 0
    assert (tiers["P"]["unpriced_models"], tiers["Q"]["unpriced_models"]) == (
        [],
        ["my-unpriced-model"],
    )
    cross = report["cross_tier"]
    assert cross["best_value_tier"] is None and cross["frontier_tier"] is None
    # The ledger charged each run of unknown cost its projection, never $0.
    assert store.ledger.state(exp_id).spent["agent"] == pytest.approx(6 * 0.25)
    assert (
        report["budget"]["notice"]
        == "budget: $0.00 of $10.00 spent (6 runs of unknown cost left out)"
    )

    wide = {**fleet_env, "COLUMNS": "200"}
    brief = run_cli("report", exp_id, env=wide)
    assert brief.returncode == 0, brief.stderr
    verdicts = brief.stdout.split("Verdict per tier", 1)[1]
    for tier in ("P", "Q", "E"):
        assert table_row(verdicts, tier)[-1] == "-"  # its cost of pass
    full = run_cli("report", exp_id, "--full", env=wide)
    assert full.returncode == 0, full.stderr
    for text in (" ".join(brief.stdout.split()), " ".join(full.stdout.split())):
        assert "$0.0000" not in text
        assert not any(f"best value: {tier}" in text for tier in ("P", "Q", "E"))
        assert "add each model's price under `pricing:` in the matrix (docs/MATRIX.md): " in text
        assert "my-unpriced-model" in text
        assert (
            "the transcript of 6 runs recorded no token usage, so what its model spent is "
            "unknown, not $0"
        ) in text
    said = " ".join(full.stdout.split())
    assert "costs are unknown, so there is no frontier cost of pass and no best value" in said
