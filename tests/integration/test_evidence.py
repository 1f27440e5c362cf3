"""Every run keeps its evidence, and `scheduler show` answers "why did this run fail?",
through the CLI with real workers: the failing gate's command and output and the
agent's stderr, caps that cut with a note, secrets redacted before anything is
stored, a killed delivery among the attempts, and an artifacts folder.
"""

from __future__ import annotations

import json
import re
import zlib
from pathlib import Path
from urllib.parse import quote

import pytest

from core.evidence.redact import MARKER
from core.store import Store
from core.store.attempts import NO_RESULT
from core.store.evidence import FILE_POINTER, evidence_file
from tests.conftest import StartWorker, run_cli
from tests.support.experiments import command_matrix

pytestmark = pytest.mark.integration

EVENTS = (
    '{"type":"llm_call","input_tokens":1200,"output_tokens":80,"tool_calls":1}',
    '{"type":"tool_call","id":"c1","command":"cat template.md"}',
    '{"type":"tool_result","id":"c1","exit_code":1}',
    '{"type":"message","role":"assistant","text":"Wrote a draft."}',
)
# Does some work, says on stderr what went wrong, and leaves a draft the gate rejects.
AGENT = (
    f"printf '%s\\n' {' '.join(repr(e) for e in EVENTS)} > \"$EVALFLEET_EVENTS\"; "
    "echo 'working on it'; echo 'could not find template.md' >&2; echo draft > out.txt"
)
GATES = (
    "[{type: file_exists, path: out.txt}, {type: command_succeeds, name: final-text, "
    "command: 'grep -q final out.txt || { echo \"expected final in out.txt\" >&2; exit 3; }'}]"
)


def submit(matrix: Path, env: dict[str, str], *extra: str) -> str:
    result = run_cli("submit", str(matrix), "--wait", "--json", *extra, env=env)
    assert result.returncode == 0, result.stderr
    return str(json.loads(result.stdout)["experiment"]["id"])


def show(env: dict[str, str], *words: str) -> str:
    result = run_cli("show", *words, env={**env, "COLUMNS": "160"})
    assert result.returncode == 0, result.stderr
    return result.stdout


def show_json(env: dict[str, str], run_id: str) -> dict:
    return json.loads(show(env, run_id, "--json"))


def test_show_says_why_a_run_failed_gate_output_stderr_transcript_and_attempt(
    fleet_env: dict[str, str], start_worker: StartWorker, tmp_path: Path
) -> None:
    start_worker(concurrency=1)
    exp_id = submit(command_matrix(tmp_path, AGENT, gates=GATES), fleet_env)
    run_id = f"{exp_id}:T0:s:0"

    shown = show(fleet_env, run_id)
    assert "outcome: completed, failed" in shown
    assert "reason: gates failed: final-text" in shown
    assert "FAIL final-text: exit code 3: expected final in out.txt" in shown
    assert (
        '$ grep -q final out.txt || { echo "expected final in out.txt" >&2; exit 3; }  [exit 3]'
        in shown
    )
    assert "    --- stderr ---\n    expected final in out.txt" in shown
    assert "pass file_exists: file 'out.txt' exists" in shown
    # The compact transcript: the LLM call with its tokens, then the tool call it made.
    assert (
        "LLM call: 1200 in / 80 out tokens, 1 tool call\n  $ cat template.md  [exit 1]\n" in shown
    )
    assert "message: assistant: Wrote a draft." in shown
    assert "could not find template.md" in shown.split("stderr (1 line, 27 bytes)")[1]
    assert "added: out.txt (6 bytes)" in shown
    # Outcome first, then gates, transcript, output tails and the deliveries.
    order = [
        "outcome:",
        "Gates (1 of 2 passed)",
        "Transcript",
        "stdout (",
        "stderr (",
        "Deliveries (1)",
    ]
    assert [shown.index(part) for part in order] == sorted(shown.index(part) for part in order)
    assert "completed: gates failed: final-text" in shown.split("Deliveries (1)")[1]

    # The same run, named by its parts or by the end of its id.
    assert show(fleet_env, exp_id, "T0", "s", "0") == shown
    assert show(fleet_env, f"{exp_id[-7:]}:T0:s:0") == shown

    record = show_json(fleet_env, run_id)
    assert record["result"]["run_id"] == run_id and record["result"]["passed"] is False
    evidence = record["evidence"]
    assert evidence["gates"][0]["command"] is None  # a file gate runs nothing
    assert evidence["gates"][1]["exit_code"] == 3
    assert "expected final in out.txt" in evidence["gates"][1]["output"]["text"]
    assert evidence["stdout"]["text"] == "working on it\n"
    assert evidence["transcript"]["text"].splitlines() == list(EVENTS)
    assert evidence["patch"]["text"] == "--- /dev/null\n+++ b/out.txt\n@@ -0,0 +1 @@\n+draft\n"
    assert set(evidence["phases"]) == {"setup", "agent", "gates"}

    # A quick run's times in ms, never "0.0 s".
    def said(seconds: float) -> str:
        return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"

    assert f"index 0 · agent {said(record['result']['duration_seconds'])} · " in shown
    phases = ", ".join(f"{p} {said(s)}" for p, s in evidence["phases"].items())
    assert f"phases: {phases}" in shown and " 0.0 s" not in shown
    [attempt] = record["attempts"]
    assert attempt["worker"].startswith("w-") and attempt["ended_at"] >= attempt["started_at"]
    assert evidence["cuts"] == []


def test_show_refuses_an_unknown_run_with_exit_2(
    fleet_env: dict[str, str], start_worker: StartWorker, tmp_path: Path
) -> None:
    start_worker(concurrency=1)
    exp_id = submit(command_matrix(tmp_path, "touch out.txt"), fleet_env)
    missing = run_cli("show", f"{exp_id}:T0:s:7", env=fleet_env)
    assert missing.returncode == 2
    assert f"experiment {exp_id} has no run 'T0:s:7'; did you mean `T0:s:0`?" in missing.stderr
    # The command it names works as printed: the experiment's id, no placeholder.
    assert f"`scheduler report {exp_id} --format json --runs` lists them" in " ".join(
        missing.stderr.split()
    )
    far = run_cli("show", f"{exp_id}:other:tier:12", env=fleet_env)
    assert far.returncode == 2 and "no run 'other:tier:12' (its runs" in far.stderr
    # The end of a run id, the scenario mistyped: the one experiment it names says.
    typo = run_cli("show", f"{exp_id[-4:]}:T0:ss:0", env=fleet_env)
    assert typo.returncode == 2
    assert f"no run '{exp_id[-4:]}:T0:ss:0' ({exp_id} has no run 'T0:ss:0'; did you mean " in (
        typo.stderr
    )
    unknown = run_cli("show", "no-such-run-anywhere", env=fleet_env)
    assert unknown.returncode == 2 and "no run 'no-such-run-anywhere'" in unknown.stderr
    words = run_cli("show", exp_id, "T0", env=fleet_env)
    assert words.returncode == 2 and "not 2 words" in words.stderr


def test_show_of_a_run_not_yet_run_says_so(fleet_env: dict[str, str], tmp_path: Path) -> None:
    submitted = run_cli("submit", str(command_matrix(tmp_path, "true")), env=fleet_env)
    exp_id = submitted.stdout.strip()
    shown = show(fleet_env, f"{exp_id}:T0:s:0")
    assert "no result yet: still queued or running, or lost" in shown
    assert show_json(fleet_env, f"{exp_id}:T0:s:0") == {
        "result": None,
        "evidence": None,
        "attempts": [],
        "version": 1,
    }
    assert run_cli("cancel", exp_id, env=fleet_env).returncode == 0


def test_caps_cut_each_text_and_the_experiment_with_a_note(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """30 KB of incompressible output per stream: each text keeps 2 KB, and once
    the experiment's 10 KB are used the later runs keep a minimal record."""
    start_worker(concurrency=1)
    flood = "head -c 30000 /dev/urandom | base64 -w 100"
    agent = f"{flood}; {flood} >&2; touch out.txt"
    caps = "evidence: {max_item_kb: 2, max_run_kb: 3, max_experiment_mb: 0.01}"
    exp_id = submit(command_matrix(tmp_path, agent, runs=4, extra=caps), fleet_env)

    records = [show_json(fleet_env, f"{exp_id}:T0:s:{i}")["evidence"] for i in range(4)]
    whole = [e for e in records if e["stdout"]["text"]]
    minimal = [e for e in records if not e["stdout"]["text"]]
    assert whole and minimal, [e["cuts"] for e in records]
    for evidence in whole:
        stdout, stderr = evidence["stdout"], evidence["stderr"]
        # 400 lines of 100 characters; the run's 3 KB (less the changes summary) are
        # shared by the two floods: under 1.5 KB each, its head and tail.
        for text in (stdout, stderr):
            assert text["total_bytes"] == 40400
            assert len(text["text"].encode()) < 1536 + 40 and "bytes cut ...]" in text["text"]
            assert text["cut"] == 40400 - len(text["text"].split("\n[...")[0].encode()) - len(
                text["text"].split("cut ...]\n")[1].encode()
            )
        notes = "\n".join(evidence["cuts"])
        assert re.search(
            r"^stdout: 40400 bytes, kept its first and last 7\d\d \(max_run_kb\)$",
            notes,
            re.MULTILINE,
        ), notes
        assert re.search(
            r"^stderr: 40400 bytes, kept its first and last 7\d\d", notes, re.MULTILINE
        )
    for evidence in minimal:
        assert evidence["cuts"] == [
            "the experiment's evidence reached max_experiment_mb (0.01 MB): only this summary "
            "of the run was kept"
        ]
        assert evidence["attempts"] and evidence["phases"]
    stored = int(store.redis.hgetall(store.keys.experiment(exp_id))["evidence_bytes"])
    blobs = store.binary.hvals(store.keys.evidence(exp_id))
    assert stored == sum(len(b) for b in blobs)
    assert sum(len(b) for b in blobs if len(b) > 1000) <= 0.01 * 1024 * 1024

    kept = show(fleet_env, whole[0]["run_id"])
    assert re.search(r"^stdout \(\d+ lines shown of 40400 bytes\)$", kept, re.MULTILINE), kept
    shown = show(fleet_env, minimal[0]["run_id"])
    assert "Cut to fit the caps\n- the experiment's evidence reached max_experiment_mb" in shown


def test_secrets_are_redacted_from_every_text_before_it_is_stored(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    secret = "s3cr3t-evidence-value-42"
    start_worker(concurrency=1, extra_env={"EVIDENCE_SECRET": secret})
    agent = (
        'echo "key=$EVIDENCE_SECRET"; echo "stderr $EVIDENCE_SECRET" >&2; '
        'echo "$EVIDENCE_SECRET" > out.txt; '
        'printf \'{"type":"message","role":"assistant","text":"used %s"}\\n\' "$EVIDENCE_SECRET" '
        '> "$EVALFLEET_EVENTS"'
    )
    gates = "[{type: command_succeeds, command: 'cat out.txt; exit 1'}]"
    matrix = command_matrix(
        tmp_path, agent, gates=gates, extra="secret_env: [EVIDENCE_SECRET]",
        pass_env=["EVIDENCE_SECRET"],
    )  # fmt: skip
    exp_id = submit(matrix, fleet_env)
    run_id = f"{exp_id}:T0:s:0"

    blob = store.binary.hget(store.keys.evidence(exp_id), run_id)
    assert blob is not None
    raw = zlib.decompress(blob).decode()
    assert secret not in raw
    evidence = json.loads(raw)
    assert evidence["stdout"]["text"] == f"key={MARKER}\n"
    assert evidence["stderr"]["text"] == f"stderr {MARKER}\n"
    assert evidence["gates"][0]["output"]["text"] == f"{MARKER}\n"
    assert f"+{MARKER}" in evidence["patch"]["text"]
    assert f"used {MARKER}" in evidence["transcript"]["text"]
    assert evidence["events"] == [{"type": "message", "text": f"assistant: used {MARKER}"}]
    assert secret not in show(fleet_env, run_id)


def test_a_killed_delivery_shows_among_the_attempts(
    fleet_env: dict[str, str], start_worker: StartWorker, tmp_path: Path
) -> None:
    """The first delivery kills its own pool process: Celery hands the run out again,
    and the run's deliveries show both, the first without a result."""
    start_worker(concurrency=1)
    marker = tmp_path / "first"
    agent = f"if mkdir {marker} 2>/dev/null; then kill -9 $PPID; sleep 30; fi; touch out.txt"
    # Unconfined: a run's own user cannot kill the worker's pool process (root's).
    matrix = command_matrix(tmp_path / "m", agent, extra="lease_s: 5", agent="sandbox: none")
    exp_id = submit(matrix, fleet_env)
    run_id = f"{exp_id}:T0:s:0"

    record = show_json(fleet_env, run_id)
    assert record["result"]["passed"] is True and record["result"]["attempts"] == 2
    first, second = record["attempts"]
    assert (first["outcome"], first["ended_at"]) == (NO_RESULT, None)
    assert second["outcome"] == "completed" and second["started_at"] > first["started_at"]
    shown = show(fleet_env, run_id)
    deliveries = shown.split("Deliveries (2)")[1]
    assert "ended without a result (its worker was killed or lost" in deliveries
    assert "completed" in deliveries


def test_an_artifacts_folder_holds_the_evidence_and_redis_its_path(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    start_worker(concurrency=1)
    folder = tmp_path / "shared" / "evidence"
    matrix = command_matrix(tmp_path, AGENT, gates=GATES)
    exp_id = submit(matrix, fleet_env, "--artifacts", str(folder))
    run_id = f"{exp_id}:T0:s:0"

    path = folder / exp_id / f"{quote(run_id, safe='')}.json.z"
    assert evidence_file(folder, exp_id, run_id) == path
    stored = store.binary.hget(store.keys.evidence(exp_id), run_id)
    assert stored == FILE_POINTER + str(path).encode()
    evidence = json.loads(zlib.decompress(path.read_bytes()))
    assert "expected final in out.txt" in evidence["gates"][1]["output"]["text"]
    assert "expected final in out.txt" in show(fleet_env, run_id)

    # A machine that does not see the folder still shows the run, and says why it
    # lacks the evidence.
    path.unlink()
    shown = show(fleet_env, run_id)
    assert "outcome: completed, failed" in shown
    assert "note: the run's evidence file cannot be read here: [Errno 2]" in shown

    # A folder that cannot be made is refused before anything is sent.
    before = store.experiments.all()
    refused = run_cli("submit", str(matrix), "--artifacts", "/dev/null/evidence", env=fleet_env)
    assert refused.returncode == 2
    assert "--artifacts: cannot create /dev/null/evidence" in refused.stderr
    assert store.experiments.all() == before


def test_show_gives_the_judges_scores_per_criterion_and_its_issues(
    fleet_env: dict[str, str], start_worker: StartWorker, tmp_path: Path
) -> None:
    from tests.support.llm_stub import LLMStub, reply

    (tmp_path / "rubric.yaml").write_text(
        "criteria: [{id: accuracy, weight: 3, description: facts right},\n"
        "           {id: style, weight: 1, description: reads well}]\n"
    )
    answer = {
        "scores": {"accuracy": 0.2, "style": 1.0},
        "weighted_score": 0.4,
        "confidence": 0.9,
        "issues": ["the notes cite [no source]"],
        "highlights": ["clear titles"],
    }
    start_worker(concurrency=1)
    with LLMStub([reply(content=json.dumps(answer))]) as stub:
        judge = f'judge: {{base_url: "{stub.base_url}", model: judge-model, api_key_env: null}}\n'
        matrix = command_matrix(tmp_path, "touch out.txt", gates="[]", extra=judge)
        text = matrix.read_text().replace(
            "evaluation: {gates: []}", "evaluation: {gates: [], judge: {rubric: rubric.yaml}}"
        )
        matrix.write_text(text)
        exp_id = submit(matrix, fleet_env)
    shown = show(fleet_env, f"{exp_id}:T0:s:0")
    assert "reason: judge score 0.40 < 0.70" in shown
    judged = shown.split("Judge (judge-model): 0.40 vs 0.70, failed")[1]
    assert re.search(r"accuracy\s+0\.20", judged) and re.search(r"style\s+1\.00", judged)
    assert "issue: the notes cite [no source]" in judged and "good: clear titles" in judged
    assert "judge" in show_json(fleet_env, f"{exp_id}:T0:s:0")["evidence"]["phases"]


def test_show_of_a_run_judged_k_times_pairs_each_score_with_its_own_reason(
    fleet_env: dict[str, str], start_worker: StartWorker, tmp_path: Path
) -> None:
    """With judge.repeats 3, each judgment's scores stand beside its own reasons (not
    the first judgment's scores beside the last one's reasons)."""
    from tests.support.experiments import judged_matrix
    from tests.support.llm_stub import LLMStub, scripted_judge

    start_worker(concurrency=1)
    with LLMStub([scripted_judge({"run=T0/0;": [0.2, 0.6, 1.0]})]) as stub:
        exp_id = submit(judged_matrix(tmp_path, stub.base_url, runs=1, tiers="T0"), fleet_env)
    shown = show(fleet_env, f"{exp_id}:T0:s:0")
    assert "Judge (judge-a): 0.60 (mean of 3 judgments, SD 0.40) vs 0.70, failed" in shown
    judged = shown.split("Judge (judge-a)")[1]
    for number, score in enumerate((0.2, 0.6, 1.0), 1):
        assert f"judgment {number} of 3: {score:.2f}" in judged
        assert re.search(rf"quality\s+{score:.2f}\s+scripted {score:g}\n", judged)
