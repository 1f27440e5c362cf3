"""The experiment's files travel with it (core.files.bundle, worker.files).

Through the CLI with real workers: the submitter's matrix folder is gone before
any worker starts, and two workers with their own working folders and caches
run the experiment from the files shipped in Redis: agent script and tool from
the matrix folder, prompt file, tier files, workspace template and the judge's
rubric. Then `scheduler delete` leaves no key of it. The rest checks the bundle
itself: what is shipped, limits (exit 2, nothing enqueued), and materialising
by several processes at once.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import stat
import threading
import time
from pathlib import Path

import pytest

from core.files.bundle import Manifest, collect, damaged, materialise, restore
from core.matrix import Matrix, load_matrix
from core.store import Store
from tests.conftest import PREFIX, QUEUE, run_cli
from tests.support.experiments import Cell, seed_experiment
from tests.support.fleet import Service, services, wait_until

ANSWER = {"scores": {"quality": 0.9}, "weighted_score": 0.9, "confidence": 0.9,
          "issues": [], "highlights": []}  # fmt: skip

AGENT = """#!/bin/sh
# Everything it was given, to stdout (the judge's transcript) and out.txt (the gates').
{ cat AGENTS.md notes.md "$PROMPT_FILE"; "$EVALFLEET_MATRIX_DIR/bin/stamp"; } > out.txt
cat out.txt
echo "matrix-dir=$EVALFLEET_MATRIX_DIR run=$EVALFLEET_RUN_ID"
"""

MATRIX = """
name: travelling
runs_per_tier: 2
agent: {{kind: command, command: '"$EVALFLEET_MATRIX_DIR/agent/run.sh"', timeout_s: 60}}
tiers:
  - {{id: T0, files: {{AGENTS.md: guidance/v1.md}}, queue: {queue}-one}}
  - {{id: T1, files: {{AGENTS.md: guidance/v2.md}}, queue: {queue}-two}}
judge: {{base_url: "{judge}", model: judge-model, max_attempts: 1, api_key_env: TEST_JUDGE_KEY}}
scenarios:
  - id: s
    prompt_file: prompt.md
    workspace: template
    evaluation:
      gates:
        - {{type: file_contains, path: out.txt, substring: template-notes}}
        - {{type: file_contains, path: out.txt, substring: stamped-by-tool}}
        - {{type: file_contains, path: out.txt, substring: PROMPT-FROM-FILE}}
        - {{type: file_contains, path: AGENTS.md, substring: guidance-v}}
      judge: {{rubric: rubrics/quality.yaml}}
"""


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def _experiment_folder(folder: Path, judge_url: str = "http://127.0.0.1:9/v1") -> Path:
    _executable(folder / "agent" / "run.sh", AGENT)
    _executable(folder / "bin" / "stamp", "#!/bin/sh\necho stamped-by-tool\n")
    (folder / "guidance").mkdir()
    (folder / "guidance" / "v1.md").write_text("guidance-v1\n")
    (folder / "guidance" / "v2.md").write_text("guidance-v2\n")
    (folder / "template").mkdir()
    (folder / "template" / "notes.md").write_text("template-notes\n")
    (folder / "prompt.md").write_text("PROMPT-FROM-FILE\n")
    (folder / "rubrics").mkdir()
    (folder / "rubrics" / "quality.yaml").write_text(
        "criteria: [{id: quality, weight: 1, description: RUBRIC-CRITERION-7}]\n"
    )
    matrix = folder / "matrix.yaml"
    matrix.write_text(MATRIX.format(queue=QUEUE, judge=judge_url))
    return matrix


def _worker(folder: Path, env: dict[str, str], queue: str, started: list[Service]) -> Service:
    """`scheduler worker` in a working folder of its own, with its own work folder
    (and so its own cache of the experiment's files)."""
    folder.mkdir()
    worker_env = {
        **env,
        "EVALFLEET_WORKDIR": str(folder / "runs"),
        "TEST_JUDGE_KEY": "sk-test-judge",
    }
    command = ["scheduler", "worker", "--queues", queue, "--concurrency", "1"]
    worker = Service(
        [*command, "--hostname", f"{folder.name}-{QUEUE}@%h"],
        worker_env,
        folder.parent / f"{folder.name}.log",
        cwd=folder,
    )
    started.append(worker)
    worker.wait_for("ready.")
    return worker


@pytest.mark.integration
def test_workers_run_the_experiment_from_its_shipped_files_then_delete_leaves_no_key(
    fleet_env: dict[str, str], store: Store, tmp_path: Path
) -> None:
    from tests.support.llm_stub import LLMStub, reply

    other = seed_experiment(store, tmp_path / "other", {("T0", "s1"): Cell((True,))})
    other_keys = sorted(store.redis.scan_iter(match=f"{PREFIX}exp:{other}*"))
    submitter = tmp_path / "submitter" / "experiment"
    with LLMStub([reply(content=json.dumps(ANSWER))]) as stub, services() as started:
        matrix = _experiment_folder(submitter, stub.base_url)
        # The judge's key is the workers' (_worker), not the submitter's.
        submitted = run_cli(
            "submit", str(matrix), "--allow-missing-judge-key", env=fleet_env, cwd=tmp_path
        )
        assert submitted.returncode == 0, submitted.stderr
        exp_id = submitted.stdout.strip()
        # No worker can see the submitter's folder: it is gone before they start.
        shutil.rmtree(tmp_path / "submitter")
        _worker(tmp_path / "first", fleet_env, f"{QUEUE}-one", started)
        # The second also takes the default queue, where the aggregates go.
        _worker(tmp_path / "second", fleet_env, f"{QUEUE}-two,{QUEUE}", started)
        wait_until(lambda: store.reports.get(exp_id), "the experiment's report", timeout=240)
        prompts = [json.dumps(request.body) for request in stub.requests]
        # Judging again (on the second worker) reads the shipped rubric too.
        rejudged = run_cli(
            "rejudge", exp_id, "--judge-model", "judge-b", "--wait", "--format", "json",
            env=fleet_env,
        )  # fmt: skip
        assert rejudged.returncode == 0, rejudged.stderr
        again = [json.dumps(request.body) for request in stub.requests[len(prompts) :]]

    shown = run_cli("report", exp_id, "--format", "json", "--runs", env=fleet_env)
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    for tier in ("T0", "T1"):
        assert report["tiers"][tier]["errors"] == 0, report["error_reasons"]
        assert report["tiers"][tier]["passes"] == 2, [r["fail_reason"] for r in report["runs"]]
    for run in report["runs"]:
        assert run["gates_passed"] == run["gates_total"] == 4
        assert run["judge"]["weighted_score"] == pytest.approx(0.9)
    # The judge read the shipped rubric, and each tier's runs ran on their worker,
    # from its own copy of the files (each tier's queue has one worker).
    assert len(prompts) == 4 and all("RUBRIC-CRITERION-7" in p for p in prompts)
    assert json.loads(rejudged.stdout)["tiers"]["T1"]["passes"] == 2
    assert len(again) == 4 and all("RUBRIC-CRITERION-7" in p and "judge-b" in p for p in again)
    for name, guidance in (("first", "guidance-v1"), ("second", "guidance-v2")):
        (copy,) = (tmp_path / name / "runs-files").iterdir()
        assert os.access(copy / "matrix" / "bin" / "stamp", os.X_OK)
        mine = [p for p in prompts if guidance in p]
        assert len(mine) == 2 and all(f"matrix-dir={copy}/matrix" in p for p in mine)

    # Retention: delete leaves no key of the experiment, the other is untouched.
    record = store.redis.hgetall(store.keys.experiment(exp_id))
    chords = record["chords"].split()
    assert chords and store.redis.hlen(store.keys.files(exp_id)) >= 6
    listed = json.loads(run_cli("list", "--json", env=fleet_env).stdout)
    sizes = {entry["id"]: entry["stored_bytes"] for entry in listed}
    assert sizes[exp_id] > sizes[other] > 0
    deleted = run_cli("delete", exp_id, "--yes", env=fleet_env)
    assert deleted.returncode == 0, deleted.stderr
    assert list(store.redis.scan_iter(match=f"{PREFIX}*{exp_id}*")) == []
    assert not any(store.redis.exists(k) for g in chords for k in store.keys.chord(g))
    assert exp_id not in store.redis.zrange(store.keys.experiments(), 0, -1)
    assert sorted(store.redis.scan_iter(match=f"{PREFIX}exp:{other}*")) == other_keys
    twice = run_cli("delete", exp_id, "--yes", env=fleet_env)
    assert twice.returncode == 2 and f"no experiment {exp_id!r}" in twice.stderr


# --- the bundle itself ---------------------------------------------------------------------------


def test_the_bundle_holds_the_matrix_folder_and_named_paths_outside_it(tmp_path: Path) -> None:
    folder = tmp_path / "experiment"
    matrix_file = _experiment_folder(folder)
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref")
    (folder / ".env").write_text("API_KEY=sk-of-the-submitter")
    (folder / "bin" / "tool").symlink_to("stamp")
    (folder / "bin" / "absolute").symlink_to(folder / "bin" / "stamp")
    os.mkfifo(folder / "pipe")  # never opened: reading it would wait for a writer
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "skill.md").write_text("SKILL")
    text = matrix_file.read_text().replace(
        "tiers:",
        f"allow_outside_files: true\ntiers:\n  - {{id: T2, files: {{S.md: {elsewhere}/skill.md}}}}",
    )
    # An artifacts folder inside the matrix folder is output: not shipped, not moved.
    (folder / "evidence" / "earlier").mkdir(parents=True)
    (folder / "evidence" / "earlier" / "run.json.z").write_bytes(b"old evidence")
    matrix_file.write_text(text + "artifacts: {dir: evidence}\n")
    matrix = load_matrix(matrix_file)
    bundle = collect(matrix)
    entries = bundle.manifest.entries

    assert "matrix/agent/run.sh" in entries and entries["matrix/agent/run.sh"].executable
    assert not entries["matrix/guidance/v1.md"].executable
    assert not any(
        part in name for name in entries for part in (".git", ".env", "pipe", "evidence")
    )
    assert entries["matrix/bin/tool"].link == "stamp"
    assert entries["matrix/bin/absolute"].link == "stamp"  # made relative: valid anywhere
    outside = bundle.manifest.outside[str(elsewhere / "skill.md")]
    assert bundle.contents[entries[outside].digest or ""] == b"SKILL"

    # Materialised elsewhere, every path of the matrix leads to the copy.
    copy = materialise(
        bundle.manifest, lambda ds: {d: bundle.contents[d] for d in ds}, tmp_path / "c"
    )
    relocate = bundle.manifest.relocation(copy)
    stored = Matrix.model_validate(
        json.loads(matrix.model_dump_json()), context={"check_files": False, "relocate": relocate}
    )
    assert stored.base_dir == copy / "matrix"
    assert stored.scenarios[0].workspace == copy / "matrix" / "template"
    assert stored.artifacts is not None and stored.artifacts.dir == folder / "evidence"
    assert relocate(folder / "template" / "notes.md").read_text() == "template-notes\n"
    assert relocate(elsewhere / "skill.md").read_text() == "SKILL"
    assert (copy / "matrix" / "bin" / "absolute").read_text() == (
        folder / "bin" / "stamp"
    ).read_text()
    assert stat.S_IMODE((copy / "matrix" / "bin" / "stamp").stat().st_mode) & 0o100


def test_a_manifest_cannot_lead_out_of_its_folder() -> None:
    for name in ("../escape", "/etc/passwd", "a/../../b", ""):
        with pytest.raises(ValueError, match="not a plain relative path"):
            Manifest.model_validate({"entries": {name: {}}})


def _materialise_in(args: tuple[str, str, str]) -> str:
    manifest_json, contents_json, cache = args
    contents = {d: bytes.fromhex(h) for d, h in json.loads(contents_json).items()}
    manifest = Manifest.model_validate_json(manifest_json)
    return str(materialise(manifest, lambda ds: {d: contents[d] for d in ds}, Path(cache)))


def test_worker_processes_materialising_at_once_share_one_complete_copy(tmp_path: Path) -> None:
    bundle = collect(load_matrix(_experiment_folder(tmp_path / "experiment")))
    contents = json.dumps({d: c.hex() for d, c in bundle.contents.items()})
    job = (bundle.manifest.model_dump_json(), contents, str(tmp_path / "cache"))
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        folders = set(pool.map(_materialise_in, [job] * 8))

    (folder,) = folders
    assert os.listdir(tmp_path / "cache") == [Path(folder).name]  # no half-built leftovers
    assert (Path(folder) / "matrix" / "guidance" / "v2.md").read_text() == "guidance-v2\n"


WEEK_AND_A_DAY_S = 8 * 24 * 3600


def _aged(folder: Path) -> Path:
    """`folder` as if no process had used it for eight days."""
    past = time.time() - WEEK_AND_A_DAY_S
    os.utime(folder, (past, past))
    return folder


def _one_file_bundle(folder: Path, text: str) -> tuple[str, str]:
    """The job `_materialise_in` takes of a one-file experiment: its manifest and contents."""
    folder.mkdir()
    (folder / "note.md").write_text(text)
    (folder / "matrix.yaml").write_text(
        "name: n\nruns_per_tier: 1\nagent: {command: 'true'}\ntiers: [{id: T0}]\n"
        "scenarios: [{id: s, prompt: go}]\n"
    )
    bundle = collect(load_matrix(folder / "matrix.yaml"))
    contents = json.dumps({d: c.hex() for d, c in bundle.contents.items()})
    return bundle.manifest.model_dump_json(), contents


def test_a_copy_no_process_used_for_a_week_goes_when_another_is_built(tmp_path: Path) -> None:
    """Every edit of a matrix folder is a new copy in each worker's cache: the ones no
    process marked in use for a week go, with what a dead build left; one a process of
    this machine is using (marked as it opened it) stays, however old it was."""
    cache = tmp_path / "cache"
    jobs = [_one_file_bundle(tmp_path / f"v{n}", f"version {n}\n") for n in range(4)]
    with multiprocessing.get_context("spawn").Pool(1) as pool:  # other processes' marks
        stale, used, recent = (
            Path(pool.apply(_materialise_in, ((*job, str(cache)),))) for job in jobs[:3]
        )
        _aged(stale)
        _aged(used)
        leftover = cache / ".building-0123456789abcdef-00000000"
        leftover.mkdir()
        (leftover / "half.md").write_text("half\n")
        _aged(leftover)
    with multiprocessing.get_context("spawn").Pool(1) as pool:  # a new process opens it
        assert pool.apply(_materialise_in, ((*jobs[1], str(cache)),)) == str(used)

    newest = Path(_materialise_in((*jobs[3], str(cache))))

    assert sorted(os.listdir(cache)) == sorted(p.name for p in (used, recent, newest))
    assert (used / "matrix" / "note.md").read_text() == "version 1\n"
    assert not stale.exists() and not leftover.exists()


def test_a_damaged_copy_is_restored_without_ever_leaving_its_place_empty(
    tmp_path: Path,
) -> None:
    """A run outside any sandbox changed the shared copy: it is rebuilt while the runs
    beside it read it. They once found no folder for the time the rebuild took (their
    gates failed, their check of the files said `$EVALFLEET_MATRIX_DIR (gone)`)."""
    folder = tmp_path / "experiment"
    (folder / "data").mkdir(parents=True)
    for n in range(1500):  # a rebuild long enough to be seen
        (folder / "data" / f"{n}.txt").write_text(f"{n}\n")
    (folder / "matrix.yaml").write_text(
        "name: n\nruns_per_tier: 1\nagent: {command: 'true'}\ntiers: [{id: T0}]\n"
        "scenarios: [{id: s, prompt: go}]\n"
    )
    bundle = collect(load_matrix(folder / "matrix.yaml"))

    def fetch(digests: list[str]) -> dict[str, bytes]:
        return {d: bundle.contents[d] for d in digests}

    copy = materialise(bundle.manifest, fetch, tmp_path / "cache")
    probe = copy / "matrix" / "data" / "7.txt"
    os.chmod(probe.parent, 0o755)
    probe.write_text("changed\n")
    missed: list[str] = []
    done = threading.Event()

    def read_all_along() -> None:
        while not done.is_set():
            try:
                probe.read_text()
            except OSError as exc:
                missed.append(str(exc))

    reader = threading.Thread(target=read_all_along)
    reader.start()
    try:
        assert restore(bundle.manifest, fetch, tmp_path / "cache") == copy
    finally:
        done.set()
        reader.join()
    assert missed == []
    assert probe.read_text() == "7\n"
    assert damaged(bundle.manifest, copy) is None
    assert os.listdir(tmp_path / "cache") == [copy.name]  # the damaged copy is gone


@pytest.mark.integration
def test_a_submit_on_this_machine_clears_the_stale_copies_of_its_cache(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    """Through the CLI: a stale copy in the embedded workers' cache is gone after a submit
    whose files are new to it."""
    env = {key: value for key, value in fleet_env.items() if key != "EVALFLEET_BROKER_URL"}
    cache = tmp_path / "cache"
    env["EVALFLEET_CACHE_DIR"] = str(cache)
    stale = cache / ("0" * 64)
    (stale / "matrix").mkdir(parents=True)
    (stale / "matrix" / "old.md").write_text("an edit ago\n")
    _aged(stale)
    folder = tmp_path / "exp"
    _one_file_bundle(folder, "now\n")
    done = run_cli("submit", str(folder / "matrix.yaml"), env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not stale.exists()
    (copy,) = cache.iterdir()
    assert (copy / "matrix" / "note.md").read_text() == "now\n"


@pytest.mark.integration
@pytest.mark.parametrize(
    ("setting", "size", "named"),
    [("max_file_mb: 0.01", 20_000, "big.bin"), ("max_mb: 0.03", 12_000, "largest")],
)
def test_files_above_the_limits_stop_the_submit_naming_file_and_setting(
    fleet_env: dict[str, str], store: Store, tmp_path: Path, setting: str, size: int, named: str
) -> None:
    matrix = _experiment_folder(tmp_path / "experiment")
    for index in range(3):
        (tmp_path / "experiment" / f"data{index}.bin").write_bytes(os.urandom(size))
    (tmp_path / "experiment" / "big.bin").write_bytes(os.urandom(size))
    matrix.write_text(
        matrix.read_text().replace("name: travelling", f"name: toolarge\nbundle: {{{setting}}}")
    )
    before = store.redis.zcard(store.keys.experiments())

    result = run_cli("submit", str(matrix), "--allow-missing-judge-key", env=fleet_env)

    assert result.returncode == 2, result.stderr
    message = " ".join(result.stderr.split())
    assert f"bundle.{setting.split(':')[0]}" in message and "nothing was started" in message
    assert named in message and str(tmp_path / "experiment") in message
    assert store.redis.zcard(store.keys.experiments()) == before
