"""Experiments through the CLI, real Celery workers and a real Redis.

Every test here submits with `scheduler` as a user would, against workers
started as separate processes, and checks what lands in Redis under
the keys core.store.keys names.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from core.evaluation.credentials import RunAs
from core.results.run import RunStatus
from core.store import Store
from fleet.sending import AGGREGATE_TASK, RUN_TASK
from tests.conftest import EXAMPLES, PREFIX, StartWorker, run_cli, shared_with_agents, start_cli
from tests.support.experiments import command_matrix
from tests.support.fleet import alive, interrupted_while_following, wait_until
from worker.celery_app import create_app

pytestmark = pytest.mark.integration


def submit_and_wait(
    matrix: Path, env: dict[str, str], *extra: str, code: int = 0
) -> tuple[str, dict]:
    """`submit --wait --json`: the report is all of stdout; `code` the exit expected
    (3 when some runs were infrastructure errors)."""
    result = run_cli("submit", str(matrix), "--wait", "--json", *extra, env=env)
    assert result.returncode == code, result.stderr
    report = json.loads(result.stdout)
    return report["experiment"]["id"], report


def test_multi_tier_experiment_completes_with_records_report_and_cross_tier(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
) -> None:
    start_worker(concurrency=2)
    exp_id, report = submit_and_wait(EXAMPLES / "matrix.yaml", fleet_env)

    assert report["experiment"]["id"] == exp_id
    assert report["experiment"]["status"] == "complete"
    assert report["experiment"]["completed_runs"] == report["experiment"]["total_runs"] == 30
    assert set(report["tiers"]) == {"T0", "T1", "T2"}
    for tier in report["tiers"].values():
        assert tier["runs"] == 10 and tier["errors"] == 0
        assert set(tier["scenarios"]) == {"create_notes", "link_notes"}
        assert tier["pass_rate"]["count"] == 10
        assert set(tier["pass_rate"]) == {
            "median",
            "mean",
            "mode",
            "min",
            "max",
            "std_dev",
            "count",
        }
    # The stand-in agent is scripted to improve with guidance and skill.
    assert report["tiers"]["T2"]["pass_rate"]["mean"] > report["tiers"]["T0"]["pass_rate"]["mean"]
    cross = report["cross_tier"]
    assert cross["baseline"] == "T0"
    t0 = report["tiers"]["T0"]["composite_score"]["median"]
    t2 = report["tiers"]["T2"]["composite_score"]["median"]
    assert cross["tier_uplift"]["T2"] == pytest.approx((t2 - t0) / t0)

    # The keys core.store.keys names, with no TTL.
    r = store.redis
    assert exp_id in r.zrange(f"{PREFIX}experiments", 0, -1)
    assert r.hget(f"{PREFIX}exp:{exp_id}", "status") == "complete"
    assert r.hlen(f"{PREFIX}exp:{exp_id}:runs") == 30
    stored = r.get(f"{PREFIX}exp:{exp_id}:report")
    assert stored is not None and json.loads(stored)["cross_tier"] == cross
    for key in (
        f"exp:{exp_id}",
        f"exp:{exp_id}:runs",
        f"exp:{exp_id}:report",
        f"exp:{exp_id}:attempts",
    ):
        assert r.ttl(PREFIX + key) == -1

    run = store.results.all(exp_id)[0]
    assert run.status == RunStatus.completed
    assert run.gates_total == 5 and len(run.llm_calls) >= 2
    assert run.llm_calls[-1].cumulative_input == sum(c.input_tokens for c in run.llm_calls)
    assert run.interaction.source == "events"
    # The stand-in agent makes one LLM call per command plus a closing one; its
    # command count varies with the (random) experiment id, this relation does not.
    for each in store.results.all(exp_id):
        assert len(each.llm_calls) == each.interaction.total_commands + 1 >= 3, each.run_id
    assert run.cost_usd is not None and run.cost_usd > 0

    # Reading it back: report with every run, list, status.
    runs = run_cli("report", exp_id, "--format", "json", "--runs", env=fleet_env)
    assert runs.returncode == 0, runs.stderr
    assert len(json.loads(runs.stdout)["runs"]) == 30
    listed = json.loads(run_cli("list", "--json", env=fleet_env).stdout)
    assert exp_id in [e["id"] for e in listed]
    status = run_cli("status", exp_id, env=fleet_env)
    assert "complete" in status.stdout and "30/30" in status.stdout
    # The chord body again (a redelivery): the same report, byte for byte.
    before = r.get(f"{PREFIX}exp:{exp_id}:report")
    again = create_app(fleet_env["EVALFLEET_BROKER_URL"]).send_task(
        AGGREGATE_TASK,
        args=(None,),
        kwargs={"experiment_id": exp_id},
        queue=fleet_env["EVALFLEET_QUEUE"],
    )
    assert again.get(timeout=60)["status"] == "complete"
    assert r.get(f"{PREFIX}exp:{exp_id}:report") == before

    for fmt, marker in (("markdown", "| tier |"), ("csv", "pass_rate_median"), ("table", "T2")):
        rendered = run_cli("report", exp_id, "--format", fmt, env=fleet_env)
        assert rendered.returncode == 0 and marker in rendered.stdout


def _matrix(
    tmp_path: Path,
    command: str,
    *,
    setup: str = "",
    runs: int = 1,
    timeout: float = 30,
    gates: str = "[{type: file_exists, path: out.txt}]",
) -> Path:
    return command_matrix(
        tmp_path,
        command,
        runs=runs,
        timeout_s=timeout,
        setup=[setup] if setup else None,
        gates=gates,
    )


def test_timed_out_agent_is_killed_with_its_child_and_recorded(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    start_worker(concurrency=1)
    pidfile = shared_with_agents(tmp_path / "child.pid")
    command = f"(trap '' TERM; sleep 300) & echo $! > {pidfile}; sleep 300"
    exp_id, report = submit_and_wait(_matrix(tmp_path, command, timeout=2), fleet_env)
    run = store.results.all(exp_id)[0]
    assert run.status == RunStatus.timeout
    assert "timed out" in (run.fail_reason or "")
    assert report["tiers"]["T0"]["errors"] == 0  # a timeout is a real, failed result
    assert not alive(int(pidfile.read_text()))


def test_crashing_agent_and_failing_setup_are_recorded_and_the_chord_completes(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    start_worker(concurrency=2)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    exp_crash, report = submit_and_wait(_matrix(tmp_path / "a", "echo boom >&2; exit 3"), fleet_env)
    crashed = store.results.all(exp_crash)[0]
    assert crashed.status == RunStatus.agent_error and crashed.exit_code == 3
    assert "boom" in (crashed.fail_reason or "")
    assert report["experiment"]["status"] == "complete"

    exp_setup, report = submit_and_wait(
        _matrix(tmp_path / "b", "touch out.txt", setup="exit 7", runs=2), fleet_env, code=3
    )
    runs = store.results.all(exp_setup)
    assert [r.status for r in runs] == [RunStatus.infra_error] * 2
    assert "setup command 'exit 7' failed" in (runs[0].fail_reason or "")
    assert report["tiers"]["T0"]["errors"] == 2
    assert report["tiers"]["T0"]["pass_rate"]["count"] == 0


def test_workspaces_are_removed_unless_kept(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    start_worker(concurrency=1)
    workdir = Path(fleet_env["EVALFLEET_WORKDIR"])
    matrix = _matrix(tmp_path, "echo kept > out.txt")
    gone, _ = submit_and_wait(matrix, fleet_env)
    assert not list(workdir.glob(f"{gone}*"))
    submitted = run_cli("submit", str(matrix), "--wait", "--keep-workspaces", env=fleet_env)
    assert submitted.returncode == 0, submitted.stderr
    kept = submitted.stdout.split()[0]
    assert "each run's folder is kept on its worker (--keep-workspaces)" in submitted.stderr
    (run_dir,) = workdir.glob(f"{kept}*")
    assert (run_dir / "workspace" / "out.txt").read_text() == "kept\n"
    assert (run_dir / "prompt.txt").read_text() == "go"
    # `show` says where it is, and a run not kept says nothing of a folder.
    shown = run_cli("show", f"{kept}:T0:s:0", env=fleet_env).stdout
    assert f"folder kept (--keep-workspaces): {run_dir}\n" in shown
    assert "folder kept" not in run_cli("show", f"{gone}:T0:s:0", env=fleet_env).stdout
    # Its run's user is leased again by later runs: none of them may reach it.
    if os.geteuid() == 0:
        kept_by = (run_dir / "workspace" / "out.txt").stat().st_uid
        assert kept_by != 0 and run_dir.stat().st_uid == 0  # the run's user's, in root's
        with RunAs(kept_by, kept_by).this_thread(), pytest.raises(PermissionError):
            (run_dir / "workspace" / "out.txt").read_text()


def test_a_redelivered_run_returns_its_stored_result(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    start_worker(concurrency=1)
    counter = shared_with_agents(tmp_path / "executions")
    exp_id, _ = submit_and_wait(_matrix(tmp_path, f"echo x >> {counter}; touch out.txt"), fleet_env)
    assert counter.read_text().count("x") == 1
    first = store.results.all(exp_id)[0]

    # Send the very same run again, as a broker redelivery would.
    spec = store.specs.all(exp_id)[0]
    summary = create_app(fleet_env["EVALFLEET_BROKER_URL"]).send_task(
        RUN_TASK, args=(spec.model_dump(mode="json"),), queue=fleet_env["EVALFLEET_QUEUE"]
    )
    assert summary.get(timeout=30)["run_id"] == first.run_id
    assert counter.read_text().count("x") == 1  # not executed again
    assert store.results.all(exp_id)[0] == first
    assert store.experiments.info(exp_id).completed_runs == 1  # not counted twice


def test_resume_finishes_a_half_done_experiment_without_rerunning_finished_runs(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counter = shared_with_agents(tmp_path / "executions")
    matrix_file = _matrix(
        tmp_path, f"echo $EVALFLEET_RUN_INDEX >> {counter}; touch out.txt", runs=4
    )
    # Submit with no worker listening, then let one run finish "before the crash"
    # by storing its result, as a worker would have.
    submitted = run_cli("submit", str(matrix_file), env=fleet_env)
    assert submitted.returncode == 0, submitted.stderr
    exp_id = submitted.stdout.strip()
    _purge_queue(store, fleet_env["EVALFLEET_QUEUE"])  # the fleet went away with its queue
    from worker.run import execute

    spec = next(s for s in store.specs.all(exp_id) if s.run_index == 2)
    monkeypatch.setenv("EVALFLEET_WORKDIR", fleet_env["EVALFLEET_WORKDIR"])
    done = execute(spec, store)
    assert done.passed and counter.read_text().split() == ["2"]
    assert store.experiments.info(exp_id).status.value == "running"

    start_worker(concurrency=2)
    resumed = run_cli("resume", exp_id, "--wait", "--format", "json", env=fleet_env)
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["experiment"]["status"] == "complete"
    assert report["tiers"]["T0"]["runs"] == 4
    assert sorted(counter.read_text().split()) == ["0", "1", "2", "3"]  # run 2 ran once
    assert store.results.get(exp_id, spec.run_id) == done


def _purge_queue(store: Store, queue: str) -> None:
    store.redis.delete(queue)


def test_cancel_records_unstarted_runs_as_cancelled(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    submitted = run_cli("submit", str(_matrix(tmp_path, "touch out.txt", runs=5)), env=fleet_env)
    exp_id = submitted.stdout.strip()
    cancelled = run_cli("cancel", exp_id, env=fleet_env)
    assert cancelled.returncode == 0 and exp_id in cancelled.stdout
    start_worker(concurrency=2)
    report = wait_until(lambda: store.reports.get(exp_id), "the report")
    assert report.experiment.status.value == "cancelled"
    tier = report.tiers["T0"]
    assert (tier.cancelled, tier.errors, tier.counted) == (5, 0, 0)
    assert report.experiment.cancelled == 5 and report.experiment.errors == 0
    assert all(r.status == RunStatus.cancelled for r in store.results.all(exp_id))


def test_unknown_experiment_and_unreachable_broker_are_clear_errors(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    missing = run_cli("report", "nope", env=fleet_env)
    assert missing.returncode == 2 and "no experiment 'nope'" in missing.stderr
    down = run_cli(
        "submit", str(_matrix(tmp_path, "true")), "--broker", "redis://127.0.0.1:1/0", env=fleet_env
    )
    assert down.returncode == 1 and "cannot reach the broker" in down.stderr


def test_bad_matrix_enqueues_nothing(
    fleet_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    queue = fleet_env["EVALFLEET_QUEUE"]
    before = store.redis.zcard(f"{PREFIX}experiments"), store.redis.lrange(queue, 0, -1)
    bad = _matrix(tmp_path, "true").read_text().replace("runs_per_tier: 1", "runs_per_tier: 0")
    (tmp_path / "bad.yaml").write_text(bad)
    result = run_cli("submit", str(tmp_path / "bad.yaml"), env=fleet_env)
    assert result.returncode == 2 and "runs_per_tier" in result.stderr
    # No experiment recorded, and the queue (shared by this session's tests) as it was.
    assert (store.redis.zcard(f"{PREFIX}experiments"), store.redis.lrange(queue, 0, -1)) == before


def test_builtin_openai_agent_runs_on_a_worker_and_its_per_call_metrics_match(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    from tests.support.llm_stub import LLMStub, ToolCall, reply

    script = [
        reply(
            tool_calls=[ToolCall("bash", {"command": "mkdir -p notes && echo a > notes/a.txt"})],
            prompt_tokens=900,
            completion_tokens=30,
        ),
        reply(
            tool_calls=[
                ToolCall("bash", {"command": "cat notes/missing.txt"}),
                ToolCall("bash", {"command": "ls notes"}),
            ],
            prompt_tokens=1150,
            completion_tokens=45,
        ),
        reply(content="Made notes/a.txt.", prompt_tokens=1500, completion_tokens=12),
    ]
    # The key lives where the agent runs: in the worker's environment.
    start_worker(concurrency=1, extra_env={"STUB_KEY": "sk-stub-key-0000"})
    with LLMStub(script) as stub:
        path = tmp_path / "matrix.yaml"
        path.write_text(f"""
name: builtin
runs_per_tier: 1
agent: {{kind: openai, base_url: "{stub.base_url}", model: gpt-4o, api_key_env: STUB_KEY,
         system_prompt: "You are careful.", max_turns: 5, timeout_s: 60}}
tiers: [{{id: T0}}]
scenarios:
  - id: s
    prompt: "Create notes/a.txt"
    evaluation: {{gates: [{{type: file_exists, path: notes/a.txt}}]}}
""")
        # Only the worker has the key: the submitter says so.
        exp_id, report = submit_and_wait(path, fleet_env, "--allow-missing-keys")
        assert len(stub.requests) == 3
        assert stub.requests[0].headers["authorization"] == "Bearer sk-stub-key-0000"
    run = store.results.all(exp_id)[0]
    assert run.passed and run.status == RunStatus.completed
    assert [(c.input_tokens, c.output_tokens, c.tool_calls_made) for c in run.llm_calls] == [
        (900, 30, 1),
        (1150, 45, 2),
        (1500, 12, 0),
    ]
    assert [c.cumulative_input for c in run.llm_calls] == [900, 2050, 3550]
    assert run.base_context == 900 and run.context_growth_avg == pytest.approx(300)
    assert run.cost_usd == pytest.approx((3550 * 5 + 87 * 15) / 1e6)
    assert run.interaction.total_commands == 3 and run.interaction.error_count == 1
    assert {"SYSTEM_PROMPT", "TOOL_SCHEMA", "TOOL_CALL", "TOOL_RESPONSE"} <= set(
        run.tokens.by_component
    )
    assert report["tiers"]["T0"]["passes"] == 1
    assert "sk-stub-key" not in json.dumps(report) + run.model_dump_json()


def test_the_judge_is_told_what_the_agent_changed_not_what_the_run_prepared(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    tmp_path: Path,
) -> None:
    from tests.support.llm_stub import LLMStub, reply

    answer = {"scores": {"quality": 0.8}, "weighted_score": 0.8, "confidence": 0.9,
              "issues": [], "highlights": []}  # fmt: skip
    (tmp_path / "template").mkdir()
    (tmp_path / "template" / "notes.md").write_text("old notes")
    (tmp_path / "AGENTS.md").write_text("guidance")
    (tmp_path / "rubric.yaml").write_text("criteria: [{id: quality, weight: 1, description: q}]\n")
    start_worker(extra_env={"TEST_JUDGE_KEY": "sk-test-judge-key"}, concurrency=1)
    with LLMStub([reply(content=json.dumps(answer))]) as stub:
        matrix = tmp_path / "matrix.yaml"
        matrix.write_text(f"""
name: changes
runs_per_tier: 1
agent: {{kind: command, command: "echo new > notes.md; echo made > out.txt", timeout_s: 30}}
tiers: [{{id: T1, files: {{AGENTS.md: AGENTS.md}}}}]
judge: {{base_url: "{stub.base_url}", model: judge-model, max_attempts: 1,
         api_key_env: TEST_JUDGE_KEY}}
scenarios:
  - id: s
    prompt: go
    workspace: template
    setup: ["mkdir deps && echo x > deps/lib.js"]
    evaluation:
      gates: [{{type: file_exists, path: out.txt}}]
      judge: {{rubric: rubric.yaml}}
""")
        # Only the worker holds the judge's key; the submitter says so.
        refused = run_cli("submit", str(matrix), env=fleet_env)
        assert refused.returncode == 2 and "--allow-missing-keys" in refused.stderr
        _, report = submit_and_wait(matrix, fleet_env, "--allow-missing-judge-key")
        prompt = json.dumps(stub.requests[0].body)

    assert report["tiers"]["T1"]["passes"] == 1
    assert "changes since the workspace was prepared: 1 added, 1 modified, 0 deleted" in prompt
    assert "added: out.txt" in prompt and "modified: notes.md" in prompt
    assert "AGENTS.md (" not in prompt and "deps/lib.js" not in prompt  # the run's, not the agent's


def test_report_wait_follows_a_shared_experiment_to_its_report(
    fleet_env: dict[str, str], start_worker: StartWorker, tmp_path: Path
) -> None:
    """The command a stopped follower names: `report --wait` waits for the fleet (here no
    worker at first) and prints the report once its runs are done."""
    queue = f"{fleet_env['EVALFLEET_QUEUE']}-report-wait"
    env = {**fleet_env, "EVALFLEET_QUEUE": queue}
    submitted = run_cli("submit", str(_matrix(tmp_path, "touch out.txt", runs=2)), env=env)
    assert submitted.returncode == 0, submitted.stderr
    exp_id = submitted.stdout.strip()
    waiting = start_cli("report", exp_id, "--wait", "--format", "json", env=env)
    try:
        time.sleep(2)
        assert waiting.poll() is None  # no worker yet: it waits
        start_worker(concurrency=2, queues=queue)
        out, said = waiting.communicate(timeout=120)
    finally:
        waiting.kill()
    assert waiting.returncode == 0, said
    report = json.loads(out)
    assert report["experiment"]["id"] == exp_id and report["tiers"]["T0"]["passes"] == 2


def test_following_an_experiment_no_worker_serves_says_so_once(
    fleet_env: dict[str, str], start_worker: StartWorker, redis_url: str, tmp_path: Path
) -> None:
    """`submit --wait` on a shared broker whose workers take other queues (or none is
    started): after a few seconds without a result it says which queue nobody takes,
    once, and goes on following; a worker started then brings the report. The command
    that starts one is printed whole on one line, though stderr is a file (where rich
    wrapped it at 80 columns) and the command is longer than that."""
    queue = f"{fleet_env['EVALFLEET_QUEUE']}-unserved-by-any-worker-of-this-fleet"
    env = {k: v for k, v in fleet_env.items() if k != "EVALFLEET_BROKER_URL"}
    env["EVALFLEET_QUEUE"] = queue
    said = tmp_path / "said"
    matrix = _matrix(tmp_path, "touch out.txt", runs=2)
    with said.open("w") as stderr:
        following = start_cli("submit", str(matrix), "--broker", redis_url, "--wait",
                              "--format", "json", env=env, stderr=stderr)  # fmt: skip
    try:
        notice = f"no worker is taking runs from queue {queue}"
        wait_until(lambda: notice in " ".join(said.read_text().split()), "the notice", 30)
        start_worker(concurrency=2, queues=queue)
        out, _ = following.communicate(timeout=120)
    finally:
        following.kill()
    assert following.returncode == 0, said.read_text()
    assert json.loads(out)["tiers"]["T0"]["passes"] == 2
    assert " ".join(said.read_text().split()).count(notice) == 1
    line = f"{notice}: start one with `scheduler worker --broker {redis_url} --queues {queue}`"
    assert line in said.read_text().splitlines(), said.read_text()


def test_a_cancel_no_worker_can_record_says_so_until_one_does(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """A shared experiment cancelled while no worker takes its queue: its runs are
    recorded as cancelled only by a worker that takes them, which cancel and status say
    (with the command that starts one); a worker started then records them."""
    queue = f"{fleet_env['EVALFLEET_QUEUE']}-cancelled"
    env = {**fleet_env, "EVALFLEET_QUEUE": queue}
    submitted = run_cli("submit", str(_matrix(tmp_path, "touch out.txt", runs=3)), env=env)
    assert submitted.returncode == 0, submitted.stderr
    exp_id = submitted.stdout.strip()
    hint = (
        f"no worker is taking runs from queue {queue}: start one with "
        f"`scheduler worker --queues {queue}`"
    )
    cancelled = run_cli("cancel", exp_id, env=env)
    assert cancelled.returncode == 0, cancelled.stderr
    assert "the rest are recorded as cancelled by the workers that take them" in cancelled.stdout
    assert hint in " ".join(cancelled.stderr.split()), cancelled.stderr
    assert hint in " ".join(run_cli("status", exp_id, env=env).stderr.split())
    start_worker(concurrency=2, queues=queue)
    wait_until(lambda: store.reports.get(exp_id), "the cancelled experiment's report", timeout=90)
    info = store.experiments.info(exp_id)
    assert (info.cancelled, info.completed_runs) == (3, 3)
    assert "no worker" not in run_cli("status", exp_id, env=env).stderr


def test_status_names_runs_not_heard_from_and_runs_lost_until_a_sweep(
    fleet_env: dict[str, str], redis_url: str, tmp_path: Path
) -> None:
    """Leases as a dead worker leaves them: one not renewed for over half of `lease_s`
    (60 s here), one lapsed that no sweep has sent again yet. Under a key prefix of its
    own, which no worker of the session sweeps."""
    prefix = f"{PREFIX}unswept-{os.getpid()}:"
    queue = f"{fleet_env['EVALFLEET_QUEUE']}-unswept"
    env = {**fleet_env, "EVALFLEET_KEY_PREFIX": prefix, "EVALFLEET_QUEUE": queue}
    own = Store.from_url(redis_url, prefix=prefix)
    try:
        submitted = run_cli("submit", str(_matrix(tmp_path, "true", runs=3)), env=env)
        assert submitted.returncode == 0, submitted.stderr
        exp_id = submitted.stdout.strip()
        late, lost, _ = (s.run_id for s in own.specs.all(exp_id))
        own.leases.take(exp_id, late, "a-dead-worker", 20)  # renewed 40 s ago
        own.leases.take(exp_id, lost, "a-dead-worker", 0.1)
        time.sleep(0.5)
        said = " ".join(run_cli("status", exp_id, env=env).stderr.split())
    finally:
        for key in own.redis.scan_iter(f"{prefix}*"):
            own.redis.delete(key)
    assert re.search(
        r"1 run in progress not heard from for up to 4\d s .* sent again once their leases "
        r"lapse, within (19|20) s",
        said,
    ), said
    assert (
        "1 run lost, its lease lapsed without a result: sent again at the next sweep, a "
        f"worker's (every EVALFLEET_SWEEP_S seconds) or a follower's, or by `scheduler resume "
        f"{exp_id}`"
    ) in said, said


def test_ctrl_c_while_following_a_shared_experiment_says_it_goes_on(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    """`submit --wait` on a shared broker, interrupted while it follows: exit 130, and
    the experiment stays with the fleet (no worker here takes it meanwhile)."""
    queue = f"{fleet_env['EVALFLEET_QUEUE']}-follow"  # no worker: the runs wait
    env = {**fleet_env, "EVALFLEET_QUEUE": queue}
    exp_id, stderr = interrupted_while_following(
        "submit", str(_matrix(tmp_path, "true")), "--wait", env=env
    )
    assert stderr.strip().splitlines()[-1] == (
        f"stopped following; the fleet goes on running it: `scheduler report {exp_id} --wait` "
        f"follows it to its report, `scheduler cancel {exp_id}` stops it"
    )
    assert run_cli("cancel", exp_id, env=env).returncode == 0
