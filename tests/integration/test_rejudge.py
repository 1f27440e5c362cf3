"""`scheduler rejudge` through the CLI with real workers: the stored judge inputs are
judged again with another judge model, once per run, no agent is started, and the
result is a new report version beside the untouched original. Asking again is free."""

from __future__ import annotations

import base64
import json
import re
import shlex
from pathlib import Path

import pytest

from core.store import Store
from tests.conftest import QUEUE, StartWorker, run_cli, shared_with_agents
from tests.support.experiments import command_matrix, judged_matrix
from tests.support.llm_stub import LLMStub, scripted_judge
from tests.support.terminal import table_row

pytestmark = pytest.mark.integration

# The fixed gate: any case, and the secret the agent wrote is redacted in the archive.
FIXED_GATE = "grep -qi hello out.txt && grep -q REDACTED out.txt"
# Judge A passes every run; judge B fails every run.
MARKERS = {f"run=T0/{i};": [0.9] for i in range(3)}


def report(exp_id: str, env: dict[str, str], *extra: str) -> str:
    shown = run_cli("report", exp_id, *extra, env=env)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def test_rejudge_with_another_model_adds_a_version_without_starting_any_agent(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    start_worker(concurrency=2)
    starts = tmp_path / "agent-starts.log"
    with LLMStub([scripted_judge(MARKERS, model_scores={"judge-b": 0.3})]) as stub:
        matrix = judged_matrix(tmp_path, stub.base_url, runs=3, tiers="T0", repeats=1)
        done = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
        assert done.returncode == 0, done.stderr
        exp_id = json.loads(done.stdout)["experiment"]["id"]
        assert len(starts.read_text().splitlines()) == 3
        original = report(exp_id, fleet_env, "--format", "json", "--runs")
        assert json.loads(original)["tiers"]["T0"]["passes"] == 3
        before = len(stub.requests)

        rejudged = run_cli(
            "rejudge", exp_id, "--judge-model", "judge-b", "--wait", "--format", "json",
            env=fleet_env,
        )  # fmt: skip
        assert rejudged.returncode == 0, rejudged.stderr
        asked = stub.requests[before:]
        # Exactly one judge call per run, each run's transcript once, all to judge-b.
        assert [r.body["model"] for r in asked] == ["judge-b"] * 3
        prompts = [r.body["messages"][-1]["content"] for r in asked]
        assert sorted(m for p in prompts for m in MARKERS if m in p) == sorted(MARKERS)
        # No agent started again.
        assert len(starts.read_text().splitlines()) == 3

    version2 = json.loads(rejudged.stdout)
    assert version2["version"] == 2
    assert version2["version_note"] == "rejudged: model judge-b"
    assert version2["tiers"]["T0"]["passes"] == 0
    assert "3 judgments, 0 from cache" in rejudged.stderr
    runs = store.reports.runs(exp_id, 2)
    assert [(r.judge.model, r.judge.weighted_score, r.passed) for r in runs if r.judge] == [
        ("judge-b", 0.3, False)
    ] * 3
    assert all(r.fail_reason == "judge score 0.30 < 0.70" for r in runs)
    assert runs[0].judge is not None and runs[0].judge.response is not None
    assert runs[0].judge.response.reasons == {"quality": "scripted 0.3"}

    # The original is unchanged, byte for byte; the default is the latest version.
    assert report(exp_id, fleet_env, "--format", "json", "--runs", "--version", "1") == original
    latest = run_cli("report", exp_id, "--format", "json", env=fleet_env)
    assert json.loads(latest.stdout)["version"] == 2
    assert "report version 2 of 2 (rejudged: model judge-b)" in latest.stderr
    assert "report version 2 (rejudged: model judge-b)" in report(exp_id, fleet_env)
    # Wide: the session's store lists every test's experiments, long ids among them.
    listed = run_cli("list", env={**fleet_env, "COLUMNS": "250"}).stdout
    assert table_row(listed, exp_id)[-2] == "1-2"  # report versions, then what it stores
    compared = run_cli("compare", exp_id, exp_id, env=fleet_env)
    assert compared.returncode == 0, compared.stderr
    assert f"note: {exp_id} has report versions 1-2; compare reads its runs as they ran" in (
        compared.stderr
    )
    shown = run_cli("show", runs[0].run_id, env=fleet_env)
    assert shown.returncode == 0, shown.stderr
    # The run as the report shows it: judged by judge-b, and said to be version 2's.
    said = " ".join(shown.stdout.split())
    assert "report version 2 of 2 (rejudged: model judge-b): the run as that version" in said
    assert "Judge (judge-b): 0.30 vs 0.70, failed" in said and "scripted 0.3" in said
    missing = run_cli("report", exp_id, "--version", "7", env=fleet_env)
    assert missing.returncode == 2 and "its versions: 1, 2" in missing.stderr

    # The same question again costs nothing, and says so: version 3 without a request
    # (the judge's stub is closed: a request would fail the judging).
    again = run_cli(
        "rejudge", exp_id, "--judge-model", "judge-b", "--wait", "--format", "json",
        env=fleet_env,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "3 judgments, 3 from cache" in again.stderr
    version3 = json.loads(again.stdout)
    assert version3["version"] == 3 and version3["judge"]["cached"] == 3
    assert version3["tiers"]["T0"]["passes"] == 0  # judge-b's verdicts, from the cache
    assert len(starts.read_text().splitlines()) == 3

    # A judge that cannot be reached: every run an infrastructure error, and the exit
    # code says so as submit's does.
    down = run_cli("rejudge", exp_id, "--judge-model", "judge-c", "--wait", env=fleet_env)
    assert down.returncode == 3, down.stderr
    assert "3 of 3 runs were infrastructure errors" in down.stderr


def test_rejudge_refuses_bad_input_and_starts_nothing(
    fleet_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    bad = tmp_path / "strict.yaml"
    bad.write_text("criteria: []\n")
    refused = run_cli("rejudge", "no-such-exp", "--rubric", str(bad), env=fleet_env)
    assert refused.returncode == 2
    assert "strict.yaml" in refused.stderr and "nothing was started" in refused.stderr
    unknown = run_cli("rejudge", "no-such-exp", env=fleet_env)
    assert unknown.returncode == 2 and "no experiment 'no-such-exp'" in unknown.stderr
    empty = run_cli("rejudge", "no-such-exp", "--judge-model", " ", env=fleet_env)
    assert empty.returncode == 2 and "--judge-model is empty" in empty.stderr


def test_rejudge_of_runs_never_judged_says_the_judge_was_off(
    fleet_env: dict[str, str], start_worker: StartWorker, tmp_path: Path
) -> None:
    """`enabled: auto` with the judge's key unset at submit: no run was judged, and
    rejudge says so, not that they were judged before evidence was kept."""
    matrix = judged_matrix(tmp_path, "http://127.0.0.1:9", runs=1, tiers="T0")
    text = matrix.read_text().replace("api_key_env: null", "api_key_env: EVALFLEET_UNSET_KEY")
    matrix.write_text(text.replace("judge: {rubric:", "judge: {enabled: auto, rubric:"))
    start_worker(concurrency=1)
    done = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert done.returncode == 0, done.stderr
    refused = run_cli("rejudge", json.loads(done.stdout)["experiment"]["id"], env=fleet_env)
    assert refused.returncode == 2
    assert "was judged, so there is nothing to judge again: its scenarios' judge was off" in (
        refused.stderr
    )
    assert "`enabled: auto` with EVALFLEET_UNSET_KEY unset" in refused.stderr
    assert "before evidence was kept" not in refused.stderr


def test_embedded_rejudge_with_more_repeats_asks_only_the_new_ones(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    """No broker: rejudge starts its own workers, as submit does. Raising repeats from 2
    to 3 asks each run's third judgment only: the first two come from the cache. Without
    the judge's key in this shell (the local workers' environment) nothing is started."""
    env = {k: v for k, v in fleet_env.items() if k != "EVALFLEET_BROKER_URL"}
    keyed = {**env, "JUDGE_KEY": "sk-judge-0123456789"}
    starts = tmp_path / "agent-starts.log"
    scores = {"run=T0/0;": [0.2, 0.6, 1.0], "run=T0/1;": [0.9, 0.9, 0.3]}
    with LLMStub([scripted_judge(scores)]) as stub:
        matrix = judged_matrix(tmp_path, stub.base_url, runs=2, tiers="T0", repeats=2)
        matrix.write_text(matrix.read_text().replace("api_key_env: null", "api_key_env: JUDGE_KEY"))
        done = run_cli("submit", str(matrix), "--json", "--workers", "2", env=keyed, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        exp_id = json.loads(done.stdout)["experiment"]["id"]
        assert len(stub.requests) == 4
        keyless = run_cli("rejudge", exp_id, "--repeats", "3", env=env, cwd=tmp_path)
        assert keyless.returncode == 2
        assert "JUDGE_KEY is not set" in keyless.stderr and "nothing was started" in keyless.stderr
        again = run_cli(
            "rejudge", exp_id, "--repeats", "3", "--format", "json", "--workers", "2",
            env=keyed, cwd=tmp_path,
        )  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert len(stub.requests) == 6  # one new judgment per run
    assert len(starts.read_text().splitlines()) == 2
    assert "6 judgments, 4 from cache" in again.stderr
    # Nothing printed at exit (the result channels chord(header)(body) subscribed to).
    assert "Traceback" not in again.stderr
    version2 = json.loads(again.stdout)
    assert version2["version"] == 2 and version2["version_note"] == "rejudged: repeats 3"
    noise = version2["judge"]["tiers"]["T0"]
    # Run variances: [.2 .6 1] .16, [.9 .9 .3] .12; their mean .14.
    assert noise["repeats"] == 3 and noise["judge_variance"] == pytest.approx(0.14)


def test_a_fresh_rejudge_asks_every_judgment_anew_and_keeps_the_new_answers(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """A judge that answered wrongly, since mended: a plain rejudge would give its cached
    answers back. `--fresh` asks each run's judgment again; the answers it gets replace
    the cached ones, which a later rejudge then reads."""
    start_worker(concurrency=2)
    scores = {"run=T0/0;": [0.2, 0.9], "run=T0/1;": [0.3, 0.8]}
    with LLMStub([scripted_judge(scores)]) as stub:
        matrix = judged_matrix(tmp_path, stub.base_url, runs=2, tiers="T0", repeats=1)
        done = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
        assert done.returncode == 0, done.stderr
        exp_id = json.loads(done.stdout)["experiment"]["id"]
        assert len(stub.requests) == 2
        fresh = run_cli("rejudge", exp_id, "--fresh", "--wait", "--format", "json", env=fleet_env)
        assert fresh.returncode == 0, fresh.stderr
        assert len(stub.requests) == 4 and "2 judgments, 0 from cache" in fresh.stderr
        again = run_cli("rejudge", exp_id, "--wait", "--format", "json", env=fleet_env)
        assert again.returncode == 0, again.stderr
        assert len(stub.requests) == 4 and "2 judgments, 2 from cache" in again.stderr
    assert json.loads(fresh.stdout)["version_note"] == "rejudged: asked anew"

    def judged(version: int) -> list[float | None]:
        runs = sorted(store.reports.runs(exp_id, version), key=lambda r: r.run_index)
        return [r.judge.weighted_score if r.judge else None for r in runs]

    assert [judged(2), judged(3)] == [[0.9, 0.8], [0.9, 0.8]]
    assert [r.judge.weighted_score for r in store.results.all(exp_id) if r.judge] == [0.2, 0.3]


def test_a_resume_that_runs_errors_again_leaves_the_rejudge_before_it_behind(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """A rejudge (version 2) made while T1's agent could not start; its program then
    installed, `resume --retry-errors` runs T1 again. `report` showed version 2, still
    T1's infrastructure errors, while `status` said 0: it now shows version 1, anew,
    and says what version 2 is; `show` no longer sends to it."""
    start_worker(concurrency=2)
    tools = shared_with_agents(tmp_path / "tools", folder=True)
    tools.chmod(0o755)
    program = tools / "t1-agent"
    scores = {"run=T0/0;": [0.9], "run=T0/1;": [0.9], "run=T1/0;": [0.8], "run=T1/1;": [0.8]}
    with LLMStub([scripted_judge(scores)]) as stub:
        matrix = judged_matrix(tmp_path, stub.base_url, runs=2, tiers="T0, T1", repeats=1)
        matrix.write_text(
            matrix.read_text().replace(
                "tiers: [{id: T0}, {id: T1}]",
                "tiers: [{id: T0}, {id: T1, agent: {command: '"
                + f'{program} && echo "run=$EVALFLEET_TIER/$EVALFLEET_RUN_INDEX;" && touch out.txt'
                + "'}}]",
            )
        )
        done = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
        assert done.returncode == 3, done.stderr
        exp_id = json.loads(done.stdout)["experiment"]["id"]
        rejudged = run_cli("rejudge", exp_id, "--wait", env=fleet_env)
        assert rejudged.returncode == 3, rejudged.stderr  # T1's errors are in it too
        program.write_text("#!/bin/sh\n")
        program.chmod(0o755)
        again = run_cli("resume", exp_id, "--retry-errors", "--wait", env=fleet_env)
        assert again.returncode == 0, again.stderr
    shown = run_cli("report", exp_id, "--format", "json", env=fleet_env)
    report = json.loads(shown.stdout)
    assert report["version"] == 1 and report["experiment"]["errors"] == 0
    assert report["tiers"]["T1"]["passes"] == 2
    assert (
        f"report version 1 of 2: version 2 was made of the runs before a resume ran some "
        f"again (--version N shows one; `scheduler rejudge {exp_id}` judges the runs as "
        "they are now)"
    ) in " ".join(shown.stderr.split())
    old = run_cli("report", exp_id, "--version", "2", "--format", "json", env=fleet_env)
    assert json.loads(old.stdout)["experiment"]["errors"] == 2  # kept as it was
    run = next(r.run_id for r in store.results.all(exp_id) if r.tier == "T1")
    assert "later version" not in run_cli("show", run, env=fleet_env).stderr
    assert store.reports.current(exp_id) == 1


def test_rescore_runs_a_fixed_gate_on_archived_workspaces_without_any_agent(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """The gate looked for "hello" where the agent wrote "Hello": fixed in a new matrix
    file, rescore passes both runs from their archived workspaces."""
    start_worker(concurrency=2, extra_env={"AGENT_SECRET": "sk-agent-secret-0123456789"})
    starts = shared_with_agents(tmp_path / "agent-starts.log")
    agent = f'echo "Hello $AGENT_SECRET" > out.txt; echo started >> {starts}'
    extra = "workspace_archive: {keep: failed}\nsecret_env: [AGENT_SECRET]"
    matrix = command_matrix(
        tmp_path / "v1", agent, runs=2, pass_env=["AGENT_SECRET"],
        gates="[{type: file_contains, path: out.txt, substring: hello}]", extra=extra,
    )  # fmt: skip
    done = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert done.returncode == 0, done.stderr
    exp_id = json.loads(done.stdout)["experiment"]["id"]
    assert json.loads(done.stdout)["tiers"]["T0"]["passes"] == 0
    original = report(exp_id, fleet_env, "--format", "json", "--runs")
    # The agent's secret never reaches the archive, though the file held it.
    archive = store.workspaces.get(exp_id, store.results.all(exp_id)[0].run_id)
    assert archive is not None and "sk-agent-secret" not in archive.model_dump_json()

    fixed = command_matrix(
        tmp_path / "v2", agent, runs=2, pass_env=["AGENT_SECRET"],
        gates=f"[{{type: command_succeeds, command: '{FIXED_GATE}'}}]", extra=extra,
    )  # fmt: skip
    rescored = run_cli(
        "rescore", exp_id, "--matrix", str(fixed), "--wait", "--format", "json", env=fleet_env
    )
    assert rescored.returncode == 0, rescored.stderr
    assert "gating 2 of 2 runs again on their archived workspaces" in rescored.stderr
    assert "rescore v2" in rescored.stderr
    version2 = json.loads(rescored.stdout)
    assert version2["version"] == 2 and version2["tiers"]["T0"]["passes"] == 2
    assert version2["version_note"] == f"rescored: gates of {fixed}"
    runs = store.reports.runs(exp_id, 2)
    assert [(r.passed, r.gates[0].gate_type, r.gates_passed) for r in runs] == [
        (True, "command_succeeds", 1)
    ] * 2
    assert len(starts.read_text().splitlines()) == 2  # no agent started again
    assert report(exp_id, fleet_env, "--format", "json", "--runs", "--version", "1") == original


def test_a_rescore_keeps_a_run_without_an_archive_exactly_as_it_was(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """Under `keep: failed` a passed run has no archive: it has no new gates either, and
    is kept as it was, not judged again from the cache (which changed its judgments'
    count and the version's "N judgments")."""
    start_worker(concurrency=2)
    scores = {"run=T0/0;": [0.9], "run=T0/1;": [0.9]}
    with LLMStub([scripted_judge(scores)]) as stub:
        matrix = judged_matrix(tmp_path, stub.base_url, runs=2, tiers="T0", repeats=1)
        text = matrix.read_text().replace(
            "touch out.txt", 'if [ "$EVALFLEET_RUN_INDEX" = 0 ]; then touch out.txt; fi'
        )
        matrix.write_text(text + "workspace_archive: {keep: failed}\n")
        done = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
        assert done.returncode == 0, done.stderr
        exp_id = json.loads(done.stdout)["experiment"]["id"]
        rescored = run_cli("rescore", exp_id, "--wait", "--format", "json", env=fleet_env)
        assert rescored.returncode == 0, rescored.stderr
    assert "gating 1 of 2 runs again on their archived workspaces" in rescored.stderr
    # The kept run's judgment was asked by the submit, not by this rescore.
    assert "1 judgment, 1 from cache; 1 run kept as before" in rescored.stderr
    before = {r.run_index: r for r in store.results.all(exp_id)}
    after = {r.run_index: r for r in store.reports.runs(exp_id, 2)}
    assert (before[0].passed, before[1].passed) == (True, False)
    assert after[0] == before[0]
    assert after[1].judge is not None and after[1].judge.cached == 1


def test_a_rescored_gate_that_commits_has_the_runs_git_identity(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """A gate run again on an archived workspace gets the environment the run had, its
    git identity among it (worker.workspace.git_identity): a gate that commits passes
    there as it passed in the run."""
    start_worker(concurrency=1)
    gate = (
        "git add -A && git commit -q --allow-empty -m checked && "
        "git log -1 --format=%an | grep -qx 'evalfleet agent'"
    )
    matrix = command_matrix(
        tmp_path, "git init -q . && echo a > a.txt", runs=2,
        gates=f"[{{type: command_succeeds, command: {json.dumps(gate)}}}]",
        extra="workspace_archive: {keep: all}",
    )  # fmt: skip
    done = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tiers"]["T0"]["passes"] == 2
    exp_id = json.loads(done.stdout)["experiment"]["id"]
    rescored = run_cli("rescore", exp_id, "--wait", "--format", "json", env=fleet_env)
    assert rescored.returncode == 0, rescored.stderr
    runs = store.reports.runs(exp_id, 2)
    assert [(r.passed, r.gates[0].message) for r in runs] == [(True, "exit code 0")] * 2


def test_rescore_without_archived_workspaces_says_how_to_keep_them(
    fleet_env: dict[str, str], start_worker: StartWorker, tmp_path: Path
) -> None:
    start_worker(concurrency=1)
    matrix = command_matrix(tmp_path, "true", runs=1)
    done = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    exp_id = json.loads(done.stdout)["experiment"]["id"]
    refused = run_cli("rescore", exp_id, env=fleet_env)
    assert refused.returncode == 2
    assert "set `workspace_archive: {keep: failed}` in the matrix" in refused.stderr


def test_rejudge_goes_to_each_runs_own_queue(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """A fleet that serves only per-tier queues rejudges too: each run's judgment is
    sent where its run went, not to the default queue no worker of that fleet reads."""
    tier_queue = f"{QUEUE}-t0"
    with LLMStub([scripted_judge(MARKERS, model_scores={"judge-b": 0.3})]) as stub:
        matrix = judged_matrix(tmp_path, stub.base_url, runs=2, tiers="T0", repeats=1)
        own_queue = f"tiers: [{{id: T0, queue: {tier_queue}}}]"
        matrix.write_text(matrix.read_text().replace("tiers: [{id: T0}]", own_queue))
        first = start_worker(concurrency=2, queues=f"{QUEUE},{tier_queue}")
        done = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
        assert done.returncode == 0, done.stderr
        exp_id = json.loads(done.stdout)["experiment"]["id"]
        first.stop()
        # Only the tier's queue is served now.
        start_worker(concurrency=2, queues=tier_queue)
        rejudged = run_cli(
            "rejudge", exp_id, "--judge-model", "judge-b", "--wait", "--format", "json",
            env=fleet_env, timeout=120,
        )  # fmt: skip
        assert rejudged.returncode == 0, rejudged.stderr
        assert [r.body["model"] for r in stub.requests].count("judge-b") == 2
    assert json.loads(rejudged.stdout)["tiers"]["T0"]["passes"] == 0
    # The version's chord body waits on the default queue, which this fleet does not
    # serve (the CLI aggregated the version itself): taken away, as its task would be.
    # The experiment's own chord body may wait there too: on a busy machine the CLI
    # can aggregate before the first worker takes it, and the worker's warm shutdown
    # hands it back (it finds the report made when it runs).
    waiting = [raw for raw in store.redis.lrange(QUEUE, 0, -1) if exp_id in _body(raw)]
    tasks = [json.loads(raw)["headers"]["task"] for raw in waiting]
    assert tasks.count("evalfleet.aggregate_version") == 1
    assert set(tasks) <= {"evalfleet.aggregate_version", "evalfleet.aggregate"}
    for raw in waiting:
        store.redis.lrem(QUEUE, 0, raw)


def _body(raw: str) -> str:
    return base64.b64decode(json.loads(raw)["body"]).decode()


def test_show_gives_a_run_as_the_report_version_it_is_named_in_scored_it(
    fleet_env: dict[str, str], start_worker: StartWorker, tmp_path: Path
) -> None:
    """A gate looked for "helo" (a typo): every run failed. A rescore with "hello"
    passes run 0 and fails run 1 for want of "hello". The report (version 2) names run 1
    with `scheduler show RUN`, which then gives version 2's result and says so; the
    first scoring's gate output, of other gates, is not shown beside it. `--version 1`
    gives the run as it ran, and version 1's report names it so in its hints."""
    start_worker(concurrency=2)
    agent = 'if [ "$EVALFLEET_RUN_INDEX" = 0 ]; then echo hello; else echo bye; fi > out.txt'

    def gates(word: str) -> str:
        return (
            f"[{{type: file_contains, path: out.txt, substring: {word}}}, "
            f"{{type: command_output_contains, command: 'cat out.txt', substring: {word}}}]"
        )

    extra = "workspace_archive: {keep: all}"
    matrix = command_matrix(tmp_path / "v1", agent, runs=2, gates=gates("helo"), extra=extra)
    done = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert done.returncode == 0, done.stderr
    exp_id = json.loads(done.stdout)["experiment"]["id"]
    assert json.loads(done.stdout)["tiers"]["T0"]["passes"] == 0
    fixed = command_matrix(tmp_path / "v2", agent, runs=2, gates=gates("hello"), extra=extra)
    rescored = run_cli("rescore", exp_id, "--matrix", str(fixed), "--wait", env=fleet_env)
    assert rescored.returncode == 0, rescored.stderr

    # The report's hint, followed as printed: version 2's result, said to be version 2's.
    hints = re.findall(r"e\.g\. (scheduler show .+)$", report(exp_id, fleet_env), re.MULTILINE)
    assert hints == [f"scheduler show {exp_id}:T0:s:1"]
    shown = run_cli(*shlex.split(hints[0])[1:], env=fleet_env)
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert (
        f"report version 2 of 2 (rescored: gates of {fixed}): the run as that version scored "
        f"it (`scheduler show {exp_id}:T0:s:1 --version 1`: as it ran)"
    ) in text
    assert "FAIL file_contains: 'out.txt' does not contain 'hello'" in text
    assert "helo'" not in text
    # The first scoring's `cat out.txt` and its output belong to other gates: left out.
    assert "$ cat out.txt" not in text
    assert "the gates' commands and output are stored as the run first ran its gates" in text
    passed = run_cli("show", f"{exp_id}:T0:s:0", env=fleet_env).stdout
    assert "outcome: completed, passed" in passed
    assert "pass file_contains: 'out.txt' contains 'hello'" in passed

    first = run_cli("show", f"{exp_id}:T0:s:1", "--version", "1", env=fleet_env)
    assert first.returncode == 0, first.stderr
    text = " ".join(first.stdout.split())
    assert "outcome: completed, failed" in text
    assert "FAIL file_contains: 'out.txt' does not contain 'helo'" in text
    assert "$ cat out.txt [exit 0]" in text and "report version 1 of 2: the run as it ran" in text
    as_json = run_cli("show", f"{exp_id}:T0:s:0", "--json", env=fleet_env)
    record = json.loads(as_json.stdout)
    assert record["version"] == 2 and record["result"]["passed"] is True
    assert "note: report version 2 of 2" in as_json.stderr

    # Version 1's report: its hints name their version, and lead to its results.
    old = report(exp_id, fleet_env, "--version", "1")
    hints = re.findall(r"e\.g\. (scheduler show .+)$", old, re.MULTILINE)
    assert hints == [f"scheduler show {exp_id}:T0:s:0 --version 1"]
    again = run_cli(*shlex.split(hints[0])[1:], env=fleet_env).stdout
    assert "does not contain 'helo'" in again and "outcome: completed, failed" in again
    # So do its closing commands: the full report of version 1, not of the default.
    closing = " ".join(old.split()).split("the full report: ")[1]
    assert closing.startswith(f"`scheduler report {exp_id} --version 1 --full`"), closing
    assert f"`scheduler report {exp_id} --version 1 --format html > report.html`" in closing

    missing = run_cli("show", f"{exp_id}:T0:s:0", "--version", "3", env=fleet_env)
    assert missing.returncode == 2
    assert f"experiment {exp_id} has no report version 3; its versions: 1, 2" in missing.stderr


def test_an_embedded_rescore_of_an_experiment_whose_judge_was_off_needs_no_key(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    """`enabled: auto` without its key at submit: the judge was off and no run was
    judged. A rescore judges again only what was judged, so it asks for no key (it
    refused with "JUDGE_KEY is not set", which the README's own example met)."""
    env = {k: v for k, v in fleet_env.items() if k not in ("EVALFLEET_BROKER_URL", "JUDGE_KEY")}
    (tmp_path / "rubric.yaml").write_text(
        "criteria: [{id: quality, weight: 1, description: the work is good}]\n"
    )
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("""
name: judge-off
runs_per_tier: 2
agent: {kind: command, command: "echo hello > out.txt", timeout_s: 30}
tiers: [{id: T0}]
judge: {base_url: "http://127.0.0.1:9/v1", model: judge-model, api_key_env: JUDGE_KEY}
workspace_archive: {keep: all}
scenarios:
  - id: s
    prompt: say hello
    evaluation:
      gates: [{type: file_contains, path: out.txt, substring: Hello}]
      judge: {enabled: auto, rubric: rubric.yaml}
""")
    done = run_cli("submit", str(matrix), "--json", "--workers", "1", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    exp_id = json.loads(done.stdout)["experiment"]["id"]
    assert json.loads(done.stdout)["tiers"]["T0"]["passes"] == 0
    fixed = tmp_path / "fixed.yaml"
    fixed.write_text(matrix.read_text().replace("substring: Hello", "substring: hello"))
    rescored = run_cli(
        "rescore", exp_id, "--matrix", str(fixed), "--format", "json", "--workers", "1",
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert rescored.returncode == 0, rescored.stderr
    assert json.loads(rescored.stdout)["tiers"]["T0"]["passes"] == 2
