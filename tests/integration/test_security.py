"""Security with real processes: no pickle from the broker, no secret stored, no escape.

- a pickle message on the run queue is refused and never unpickled;
- the values of secret variables (judge key, `secret_env`) are nowhere in Redis,
  the reports, the CLI's output or the worker's log, however the agent, gates
  and judge echo them;
- workspaces: tier files cannot be written and cleanup cannot delete outside
  the run's folder;
- `sandbox: bwrap`: no network, read-only system, only the workspace writable.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import subprocess
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

import pytest
import redis
from kombu import Connection, Exchange, Queue

from core.errors import SetupError
from core.evidence.models import Excerpt
from core.matrix import Matrix, Scenario, Tier
from core.results.report import ExperimentInfo, ExperimentStatus
from core.results.run import RunSpec, RunStatus
from core.store import Store
from fleet.sending import RUN_TASK
from tests.conftest import PREFIX, QUEUE, StartWorker, Worker, run_cli
from tests.support.fleet import RedisServer, wait_until
from tests.support.html_pages import run_details
from tests.support.llm_stub import LLMStub, RecordedRequest, Step, reply
from worker.celery_app import create_app
from worker.sandbox import bwrap_argv
from worker.workspace import RunDir, prepare

# --- pickle -------------------------------------------------------------------------------


class _Exploit:
    """Unpickling this runs a shell command: what a pickle on a broker can do."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (self.command,))


def _experiment(store: Store, runs: int) -> list[RunSpec]:
    exp_id = f"pickle-{uuid.uuid4().hex[:8]}"
    matrix = Matrix.model_validate(
        {"name": "pickle", "agent": {"command": "true"}, "tiers": [{"id": "T0"}],
         "scenarios": [{"id": "s", "prompt": "go"}]}
    )  # fmt: skip
    specs = [
        RunSpec(experiment_id=exp_id, run_id=f"{exp_id}:{i}", tier="T0", scenario="s",
                run_index=i)
        for i in range(runs)
    ]  # fmt: skip
    info = ExperimentInfo(id=exp_id, name="pickle", status=ExperimentStatus.running,
                          total_runs=runs, created_at=time.time())  # fmt: skip
    store.experiments.create(info, matrix, specs)
    return specs


@pytest.mark.integration
def test_a_pickle_message_on_the_broker_is_refused_and_never_unpickled(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    worker = start_worker(concurrency=1)
    pickled, control = _experiment(store, runs=2)
    canary = tmp_path / "unpickled"
    task_id = str(uuid.uuid4())
    body = pickle.dumps(((pickled.model_dump(mode="json"), _Exploit(f"touch {canary}")), {}, {}))
    queue = Queue(QUEUE, Exchange(QUEUE), routing_key=QUEUE)
    with Connection(fleet_env["EVALFLEET_BROKER_URL"]) as conn:
        conn.Producer().publish(
            body,
            exchange=queue.exchange,
            routing_key=QUEUE,
            declare=[queue],
            serializer=None,
            content_type="application/x-python-serialize",
            content_encoding="binary",
            headers=_task_headers(task_id),
        )
    # A JSON run sent after it: once it is done, the worker has dealt with the pickle.
    app = create_app(fleet_env["EVALFLEET_BROKER_URL"])
    app.send_task(
        RUN_TASK, args=(control.model_dump(mode="json"),), queue=QUEUE, ignore_result=True
    )
    wait_until(lambda: store.results.get(control.experiment_id, control.run_id), "the control run")

    assert not canary.exists()  # never unpickled
    assert store.results.get(pickled.experiment_id, pickled.run_id) is None  # never run
    assert store.redis.hget(store.keys.attempts(pickled.experiment_id), pickled.run_id) is None
    log = worker.log.read_text()
    assert "Refusing to deserialize untrusted content of type pickle" in log
    assert worker.proc.poll() is None


def _task_headers(task_id: str) -> dict[str, Any]:
    """Celery's protocol-2 headers: the message looks like any run task."""
    return {
        "lang": "py", "task": "evalfleet.run", "id": task_id, "root_id": task_id,
        "parent_id": None, "group": None, "retries": 0, "eta": None, "expires": None,
        "timelimit": [None, None], "argsrepr": "", "kwargsrepr": "", "origin": "attacker",
    }  # fmt: skip


# --- secrets ------------------------------------------------------------------------------

AGENT = """
echo "stdout $AGENT_SECRET $JUDGE_SECRET"; echo "stderr $AGENT_SECRET $JUDGE_SECRET" >&2
{
  echo '{"type":"tool_call","id":"c1","command":"my-tool '"$AGENT_SECRET $JUDGE_SECRET"'"}'
  echo '{"type":"tool_result","id":"c1","exit_code":3}'
  echo '{"type":"message","role":"assistant","text":"my key is '"$AGENT_SECRET"'"}'
} > "$EVALFLEET_EVENTS"
echo "$AGENT_SECRET" > leaked.txt
exit 1
"""


@pytest.mark.integration
def test_secret_values_reach_no_record_report_or_log(
    fleet_env: dict[str, str], redis_url: str, store: Store, tmp_path: Path
) -> None:
    agent_secret = f"sk-agent-{uuid.uuid4().hex}"
    judge_secret = f"jk-judge-{uuid.uuid4().hex}"
    secrets = (agent_secret, judge_secret)

    def echoing_judge(request: RecordedRequest) -> Step:
        answer = {"scores": {"quality": 0.5, f"{agent_secret}": 1.0}, "weighted_score": 0.5,
                  "confidence": 0.5, "issues": [f"saw {agent_secret}", judge_secret],
                  "highlights": []}  # fmt: skip
        return reply(content=json.dumps(answer))

    (tmp_path / "rubric.yaml").write_text("criteria: [{id: quality, weight: 1, description: q}]\n")
    with LLMStub([echoing_judge]) as stub:
        matrix = tmp_path / "matrix.yaml"
        matrix.write_text(f"""
name: secrets
runs_per_tier: 1
secret_env: [AGENT_SECRET]
agent: {{kind: command, command: {json.dumps(AGENT)}, timeout_s: 30,
        pass_env: [AGENT_SECRET, JUDGE_SECRET]}}
tiers: [{{id: T0}}]
judge: {{base_url: "{stub.base_url}", model: judge-model, api_key_env: JUDGE_SECRET,
         max_attempts: 1}}
scenarios:
  - id: s
    prompt: go
    target: {{command_pattern: 'my-tool\\s+(\\S+)'}}
    evaluation:
      gates:
        - {{type: command_succeeds, command: 'echo "$AGENT_SECRET $JUDGE_SECRET" >&2; exit 1'}}
        - {{type: script, command: 'echo "{{\\"leak\\": \\"$AGENT_SECRET\\"}}"'}}
        - {{type: file_contains, path: leaked.txt, substring: nothing}}
      judge: {{rubric: rubric.yaml}}
""")
        env = {**fleet_env, "AGENT_SECRET": agent_secret, "JUDGE_SECRET": judge_secret}
        worker = Worker(env, tmp_path / "worker.log", anew=True)  # agents read its environ
        try:
            # Only the worker holds the judge's key: the submitter says so.
            submitted = run_cli(
                "submit", str(matrix), "--wait", "--json", "--allow-missing-judge-key",
                env=fleet_env,
            )  # fmt: skip
            assert submitted.returncode == 0, submitted.stderr
            exp_id = json.loads(submitted.stdout)["experiment"]["id"]
            outputs = [submitted.stdout, submitted.stderr]
            for fmt in ("json", "markdown", "csv", "html"):
                shown = run_cli("report", exp_id, "--format", fmt, "--runs", env=fleet_env)
                outputs += [shown.stdout, shown.stderr]
        finally:
            worker.stop()

    # The secrets were really used and echoed everywhere they could be...
    assert stub.requests[0].headers["authorization"] == f"Bearer {judge_secret}"
    run = store.results.all(exp_id)[0]
    assert run.status == RunStatus.agent_error
    assert "[REDACTED]" in (run.fail_reason or "")
    assert "[REDACTED]" in run.interaction.per_subcommand
    assert run.gates[1].details == {"leak": "[REDACTED]"}
    assert run.judge is not None and run.judge.response is not None
    assert run.judge.response.issues == ["saw [REDACTED]", "[REDACTED]"]
    # ... and stored nowhere: not in the judge's prompt, any Redis key, output or log.
    assert not any(s in r.raw.decode() for r in stub.requests for s in secrets)
    leaks = [key for key, value in _every_value(redis_url) if any(s in value for s in secrets)]
    assert leaks == []
    # The run's evidence (compressed, so not readable above) holds the judge's raw answer.
    evidence = store.evidence.get(exp_id, run.run_id)
    assert evidence is not None and evidence.judge is not None
    assert "[REDACTED]" in (evidence.judge.calls[0].raw_answer or Excerpt()).text
    assert not any(s in evidence.model_dump_json() for s in secrets)
    # The HTML report carries each run's details compressed: read them inflated too.
    details = [run_details(text) for text in outputs]
    assert any(details)  # the html report's runs, with their evidence
    outputs += [json.dumps(d, ensure_ascii=False) for d in details]
    assert not any(s in text for text in outputs for s in secrets)
    assert not any(s in (tmp_path / "worker.log").read_text() for s in secrets)


# An unsandboxed agent hunting for the broker's password: every ancestor's
# environment, and what the gate's parent (the pool process) was started with.
BROKER_HUNT = """
pid=$PPID; found=""
while [ -n "$pid" ] && [ "$pid" -gt 1 ]; do
  echo "read the environment of pid $pid"
  found="$found$(tr '\\0' '\\n' < /proc/$pid/environ 2>/dev/null | grep -i -e broker -e redis)"
  pid=$(awk '/^PPid:/{{print $2}}' /proc/$pid/status)
done
printf '%s\\n' "$found" > {found}
echo "found: $found"; echo "found: $found" >&2
exit 1
"""


@pytest.mark.integration
def test_the_broker_password_reaches_no_agent_result_report_or_judge(
    fleet_env: dict[str, str], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    password = f"brokerpw-{uuid.uuid4().hex}"
    broker = RedisServer(tmp_path_factory.mktemp("redis"), password=password)
    env = {**fleet_env, "EVALFLEET_BROKER_URL": broker.url}
    found = tmp_path / "found.txt"
    gate_found = tmp_path / "gate-found.txt"
    hunt = BROKER_HUNT.format(found=found)
    gate = f"tr '\\0' '\\n' < /proc/$PPID/environ | grep -i broker | tee {gate_found}; exit 1"

    def echoing_judge(request: RecordedRequest) -> Step:  # a judge that repeats what it saw
        seen = [line for line in request.raw.decode().split("\\n") if "redis" in line.lower()]
        answer = {"scores": {"quality": 0.1}, "weighted_score": 0.1, "confidence": 0.5,
                  "issues": seen[:5], "highlights": []}  # fmt: skip
        return reply(content=json.dumps(answer))

    (tmp_path / "rubric.yaml").write_text("criteria: [{id: quality, weight: 1, description: q}]\n")
    outputs: list[str] = []
    try:
        with LLMStub([echoing_judge]) as stub:
            matrix = tmp_path / "matrix.yaml"
            matrix.write_text(f"""
name: broker-secret
runs_per_tier: 1
# Unconfined: the worker's own scrubbing is what is tested (confined, its environ is
# not the agent's to read at all).
agent: {{kind: command, command: {json.dumps(hunt)}, timeout_s: 30, sandbox: none}}
tiers: [{{id: T0}}]
judge: {{base_url: "{stub.base_url}", model: judge-model, api_key_env: null, max_attempts: 1}}
scenarios:
  - id: s
    prompt: go
    evaluation:
      gates: [{{type: command_succeeds, command: {json.dumps(gate)}}}]
      judge: {{rubric: rubric.yaml}}
""")
            worker = Worker(env, tmp_path / "worker.log", anew=True)  # agents read its environ
            try:
                submitted = run_cli("submit", str(matrix), "--wait", "--json", env=env)
                assert submitted.returncode == 0, submitted.stderr
                exp_id = json.loads(submitted.stdout)["experiment"]["id"]
                outputs += [submitted.stdout, submitted.stderr]
                for fmt, every in (
                    ("json", "--runs"),
                    ("markdown", ""),
                    ("csv", "--runs"),
                    ("html", ""),
                ):
                    args = ["report", exp_id, "--format", fmt, *filter(None, [every])]
                    shown = run_cli(*args, env=env)
                    assert shown.returncode == 0, shown.stderr
                    outputs += [shown.stdout, shown.stderr]
            finally:
                worker.stop()
        store = Store.from_url(broker.url, prefix=PREFIX)
        stored = [run.model_dump_json() for run in store.results.all(exp_id)]
        every_value = _every_value(broker.url)
    finally:
        broker.stop()

    # The agent did walk its ancestors (the pool process, the worker, and up)...
    prompt = stub.requests[0].raw.decode()
    assert prompt.count("read the environment of pid") >= 2
    # ... and found nothing: the worker's own environment no longer holds the URL.
    assert password not in found.read_text() and password not in gate_found.read_text()
    # Nothing stored, rendered or sent to the judge holds it either.
    assert stored and not any(password in text for text in stored)
    outputs += [json.dumps(run_details(text), ensure_ascii=False) for text in outputs]
    assert not any(password in text for text in outputs)
    assert not any(password in r.raw.decode() for r in stub.requests)
    assert not any(password in value for _, value in every_value)


def _every_value(url: str) -> list[tuple[str, str]]:
    """Every key of the database at `url` with all its content as text, whatever its
    type; compressed values (evidence) are read inflated."""
    client = redis.Redis.from_url(url)  # replies undecoded: the blobs are not text
    found = []
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        if kind == b"string":
            parts: list[Any] = [client.get(key)]
        elif kind == b"hash":
            parts = [item for pair in client.hgetall(key).items() for item in pair]
        elif kind == b"list":
            parts = client.lrange(key, 0, -1)
        elif kind == b"set":
            parts = list(client.smembers(key))
        elif kind == b"zset":
            parts = client.zrange(key, 0, -1)
        else:
            parts = []
        found.append((key.decode(), " ".join(_text(p) for p in [key, *parts])))
    return found


def _text(value: bytes) -> str:
    with contextlib.suppress(zlib.error):
        value = zlib.decompress(value)
    return value.decode(errors="replace")


# --- workspaces -----------------------------------------------------------------------------


def _scenario(template: Path | None) -> Scenario:
    return Scenario.model_validate(
        {"id": "s", "prompt": "go", "workspace": template}, context={"check_files": False}
    )


def test_tier_files_cannot_be_written_outside_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALFLEET_WORKDIR", str(tmp_path / "runs"))
    outside = tmp_path / "outside"
    outside.mkdir()
    template = tmp_path / "template"
    template.mkdir()
    (template / "docs").symlink_to(outside)  # a template folder that leads out
    source = tmp_path / "guide.md"
    source.write_text("guidance")
    tier = Tier.model_validate(
        {"id": "T0", "files": {"docs/AGENTS.md": str(source)}}, context={"check_files": False}
    )
    with pytest.raises(SetupError, match="leads outside the workspace"):
        prepare("run-1", tier, _scenario(template), "go")
    assert list(outside.iterdir()) == []

    # The template's links are copied as links, never followed into a copy.
    run_dir = prepare("run-2", Tier(id="T1"), _scenario(template), "go")
    assert (run_dir.workspace / "docs").is_symlink()


def test_cleanup_deletes_nothing_outside_the_run_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALFLEET_WORKDIR", str(tmp_path / "runs"))
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("keep")
    victim = prepare("victim", Tier(id="T0"), _scenario(None), "go")

    # An agent links its workspace to the outside, and swaps its run folder for
    # a link to another run's folder.
    run_dir = prepare("attacker", Tier(id="T0"), _scenario(None), "go")
    (run_dir.workspace / "host").symlink_to(precious)
    run_dir.remove()
    assert (precious / "keep.txt").exists() and not run_dir.root.exists()

    swapped = prepare("swapper", Tier(id="T0"), _scenario(None), "go")
    shutil.rmtree(swapped.root)
    swapped.root.symlink_to(victim.root)
    swapped.remove()
    assert not swapped.root.is_symlink() and victim.workspace.is_dir()

    # A run id cannot name a folder outside the work root either.
    escaped = RunDir(tmp_path / "runs" / ".." / "precious")
    escaped.remove()
    assert (precious / "keep.txt").exists()


# --- the bwrap sandbox --------------------------------------------------------------------


def _bwrap_problem() -> str | None:
    """Why bwrap cannot be tested here, or None."""
    binary = shutil.which("bwrap")
    if binary is None:
        return "bubblewrap is not installed (apt-get install bubblewrap; .ci/run tries it)"
    probe = subprocess.run(
        [binary, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return f"bwrap cannot create its namespaces here: {probe.stderr.strip()}"
    return None


JAILED = """
echo inside > in-workspace.txt
touch {outside}/$EVALFLEET_TIER 2>/dev/null && echo outside=written >> report.txt \
  || echo outside=blocked >> report.txt
if [ "$EVALFLEET_TIER" = jailed ]; then  # unconfined, a root worker could write /usr
  touch /usr/evalfleet-jail-test 2>/dev/null && echo system=written >> report.txt \
    || echo system=blocked >> report.txt
fi
(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo net=open >> report.txt \
  || echo net=blocked >> report.txt
echo '{{"type":"tool_call","id":"c1","command":"ls"}}' > "$EVALFLEET_EVENTS"
"""


@pytest.mark.integration
def test_bwrap_sandbox_has_no_network_and_writes_only_its_workspace(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
) -> None:
    problem = _bwrap_problem()
    if problem is not None:
        pytest.skip(problem)
    outside = tmp_path / "outside"
    outside.mkdir()
    port = redis.Redis.from_url(fleet_env["EVALFLEET_BROKER_URL"]).connection_pool.connection_kwargs
    command = JAILED.format(outside=outside, port=port.get("port", 6379))
    gate = "{{type: file_contains, path: report.txt, substring: '{}'}}"
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(f"""
name: sandbox
runs_per_tier: 1
agent: {{kind: command, command: {json.dumps(command)}, timeout_s: 30}}
tiers:
  - {{id: jailed, agent: {{sandbox: bwrap}}}}
  - {{id: open, agent: {{sandbox: none}}}}
scenarios:
  - id: s
    prompt: go
    evaluation:
      gates:
        - {{type: file_exists, path: in-workspace.txt}}
        - {gate.format("outside=blocked")}
        - {gate.format("system=blocked")}
        - {gate.format("net=blocked")}
""")
    start_worker(concurrency=2)
    result = run_cli("submit", str(matrix), "--wait", "--json", env=fleet_env)
    assert result.returncode == 0, result.stderr
    runs = {r.tier: r for r in store.results.all(json.loads(result.stdout)["experiment"]["id"])}

    jailed = runs["jailed"]
    assert jailed.passed, [g.message for g in jailed.gates]
    assert jailed.interaction.total_commands == 1  # its events file was writable
    assert not (outside / "jailed").exists()
    # The same agent unconfined reaches the network and the host's files.
    assert [g.passed for g in runs["open"].gates] == [True, False, False, False]
    assert (outside / "open").exists()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_jail_shows_its_experiments_files_and_no_other_in_the_workers_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cache of experiments' files outside the temporary folder (EVALFLEET_CACHE_DIR)
    holds others' hidden tests, which a worker's own user may read: the jail (run here
    as this test's user, as a worker not running as root runs it) masks all of it but
    the experiment's own folder."""
    top = Path("/var/tmp") / f"evalfleet-test-{uuid.uuid4().hex[:8]}"
    try:
        cache = top / "files"
        (cache / "other" / "tests").mkdir(parents=True)
        (cache / "other" / "tests" / "expected.txt").write_text("other's answer\n")
        (cache / "mine").mkdir()
        (cache / "mine" / "check.sh").write_text("mine\n")
        monkeypatch.setenv("EVALFLEET_CACHE_DIR", str(cache))
        run_dir = RunDir(tmp_path / "run")
        run_dir.workspace.mkdir(parents=True)
        look = f"cat {cache}/other/tests/expected.txt; ls {cache}; cat {cache}/mine/check.sh"
        argv = [*bwrap_argv(run_dir, cache / "mine"), "bash", "-c", look]
        seen = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert seen.stdout.split() == ["mine", "mine"], seen
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_jail_masks_the_workers_home_but_the_software_its_path_finds_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's home holds its user's keys and, say, a clone of the benchmark with its
    solutions: a jail run as that user (a worker not running as root) could read them.
    The jail masks it; the tools its PATH finds there still run: a package's prefix
    (the files beside its bin/), and of a bin/ right in the home (~/.cargo, ~/.local)
    the programs and where their links lead, not the credentials and histories beside."""
    home = Path("/var/tmp") / f"evalfleet-test-{uuid.uuid4().hex[:8]}"
    secrets = {
        ".ssh/id_ed25519": "private key",
        "src/bench/solution/solve.sh": "the answer",
        ".cargo/credentials.toml": "cargo token",
        ".local/share/fish/fish_history": "OPENAI_API_KEY=sk-x",
    }
    try:
        for name, text in secrets.items():
            (home / name).parent.mkdir(parents=True, exist_ok=True)
            (home / name).write_text(text + "\n")
        tool = home / "tools" / "greeter"
        (tool / "lib").mkdir(parents=True)
        (tool / "lib" / "greeting").write_text("hello\n")
        _program(tool / "bin" / "hello", 'cat "$(dirname "$0")/../lib/greeting"')
        _program(home / ".cargo" / "bin" / "cargo-ish", "echo cargo")
        _program(home / ".local" / "share" / "app" / "v1" / "app", "echo app")
        (home / ".local" / "bin").mkdir()
        (home / ".local" / "bin" / "app").symlink_to(
            home / ".local" / "share" / "app" / "v1" / "app"
        )
        monkeypatch.setenv("HOME", str(home))
        path = [tool / "bin", home / ".cargo" / "bin", home / ".local" / "bin"]
        monkeypatch.setenv("PATH", os.pathsep.join([*map(str, path), ".", os.environ["PATH"]]))
        monkeypatch.chdir(home / "src")  # `.` on PATH: the worker's folder, not software
        run_dir = RunDir(tmp_path / "run")
        run_dir.workspace.mkdir(parents=True)
        look = f"hello; cargo-ish; app; cat {' '.join(str(home / name) for name in secrets)}"
        argv = [*bwrap_argv(run_dir, None), "bash", "-c", look]
        seen = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert seen.stdout.split() == ["hello", "cargo", "app"], seen
        assert seen.stderr.count("No such file or directory") == len(secrets), seen
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_jail_masks_the_submitters_folder_but_the_venv_runs_and_cache_it_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The submitter's matrix folder on this machine (an embedded run) holds the matrix
    with its references, the rubrics and the tests as written, of the usual modes: the
    jail masks it. What the worker keeps there still shows: the project's .venv its PATH
    finds (read-only), the work folder with the run's workspace (writable) and the cache
    with the experiment's own copy."""
    project = Path("/var/tmp") / f"evalfleet-test-{uuid.uuid4().hex[:8]}"
    try:
        (project / "rubrics").mkdir(parents=True)
        (project / "matrix.yaml").write_text("reference: the answer\n")
        (project / "rubrics" / "quality.yaml").write_text("the criteria\n")
        _program(project / ".venv" / "bin" / "tool", "echo tool")
        (project / "files" / "mine").mkdir(parents=True)
        (project / "files" / "mine" / "check.sh").write_text("mine\n")
        for folder in (project, *project.rglob("*")):
            folder.chmod(0o755 if folder.is_dir() else folder.stat().st_mode | 0o644)
        monkeypatch.setenv("PATH", f"{project / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("EVALFLEET_WORKDIR", str(project / "runs"))
        monkeypatch.setenv("EVALFLEET_CACHE_DIR", str(project / "files"))
        run_dir = RunDir(project / "runs" / "run")
        run_dir.workspace.mkdir(parents=True)
        look = (
            f"tool; cat {project}/files/mine/check.sh; echo written > out.txt && cat out.txt; "
            f"cat {project}/matrix.yaml {project}/rubrics/quality.yaml; ls {project}"
        )
        argv = [
            *bwrap_argv(run_dir, project / "files" / "mine", away=[project]),
            "bash",
            "-c",
            look,
        ]
        seen = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert seen.stdout.split()[:3] == ["tool", "mine", "written"], seen
        assert "answer" not in seen.stdout and "criteria" not in seen.stdout, seen
        assert seen.stderr.count("No such file or directory") == 2, seen
        assert (run_dir.workspace / "out.txt").read_text() == "written\n"
        # Without it (a worker elsewhere, or before), the jail showed them.
        argv = [*bwrap_argv(run_dir, project / "files" / "mine"), "bash", "-c", look]
        assert "the answer" in subprocess.run(argv, capture_output=True, text=True).stdout
    finally:
        shutil.rmtree(project, ignore_errors=True)


def _program(path: Path, script: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)


def test_a_worker_without_bwrap_refuses_rather_than_running_unconfined(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SetupError, match="install bubblewrap"):
        bwrap_argv(RunDir(tmp_path / "run"), None)
