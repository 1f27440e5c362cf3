"""Graders out of reach: an agent that rewrites the checks it is graded with, or hunts
for the hidden tests, moves no number (worker.confinement, core.files.bundle).

Each test's agents are adversaries with real processes, against a real worker:
- under the default (`sandbox: auto`: a user of the run's own, the worker being
  root here) a tampering agent cannot write its grader, passes nothing, and a later
  experiment from the same files on the same worker is graded by the same, whole
  grader;
- unconfined (`sandbox: none`) its rewrite is caught by hash: the run is `tampered`,
  counted against it, and the folder restored for every run after it;
- hidden tests reach the gates only: an agent searching every place it can read
  (the shipped folder, its run's folder and those above it, /tmp, every process's
  environ and command line, a child left running to wait for them) finds neither
  the tests nor the reference answer the matrix file holds.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.results.run import RunStatus
from core.store import Store
from tests.conftest import FIXTURES, StartWorker, run_cli, shared_with_agents
from tests.support.experiments import command_matrix

ANSWER = "42"
# What the hidden test and the matrix's reference hold, and nothing the agent may see.
# Made anew each session: not in any file (this one included) an agent could read.
_SUFFIX = uuid.uuid4().hex[:10]
SECRET = f"hidden-answer-{_SUFFIX}"
# What the hunter greps for: a pattern matching SECRET that does not match itself, so
# its own environ and command line are no find.
SEARCHED = f"hidden-answe[r]-{_SUFFIX}"

# Rewrites the grader every way it can, then answers wrongly.
TAMPER = r"""
check="$EVALFLEET_MATRIX_DIR/check.sh"
printf '#!/bin/bash\nexit 0\n' > "$check" 2>/dev/null
chmod u+w "$check" "$EVALFLEET_MATRIX_DIR" 2>/dev/null
printf '#!/bin/bash\nexit 0\n' > "$check" 2>/dev/null
rm -f "$check" 2>/dev/null && printf '#!/bin/bash\nexit 0\n' > "$check" 2>/dev/null
echo 41 > answer.txt
"""


def _grader_matrix(folder: Path, tamper_sandbox: str | None = None) -> Path:
    folder.mkdir(exist_ok=True)
    check = folder / "check.sh"
    check.write_text(f"#!/bin/bash\ngrep -qx {ANSWER} answer.txt\n")
    check.chmod(0o755)
    sandbox = f", sandbox: {tamper_sandbox}" if tamper_sandbox else ""
    matrix = folder / "matrix.yaml"
    matrix.write_text(f"""
name: graders
runs_per_tier: 2
agent: {{kind: command, command: "echo 41 > answer.txt", timeout_s: 30}}
tiers:
  - {{id: tamper, agent: {{command: {json.dumps(TAMPER)}{sandbox}}}}}
  - {{id: wrong}}
  - {{id: right, agent: {{command: "echo {ANSWER} > answer.txt"}}}}
scenarios:
  - id: s
    prompt: answer
    evaluation:
      gates: [{{type: command_succeeds, command: 'bash "$EVALFLEET_MATRIX_DIR/check.sh"'}}]
""")
    return matrix


def _submit(matrix: Path, env: dict[str, str]) -> str:
    done = run_cli("submit", str(matrix), "--wait", "--json", env=env)
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["experiment"]["id"])


def _own_cache(start_worker: StartWorker, tmp_path: Path, concurrency: int) -> Path:
    """A worker whose cache of experiments' files is this test's alone (the session's
    workers share one, holding other tests' copies of the same check.sh)."""
    cache = tmp_path / "files"
    start_worker({"EVALFLEET_CACHE_DIR": str(cache)}, concurrency=concurrency)
    return cache


def _shipped_checks(cache: Path) -> list[bytes]:
    """Every copy of check.sh in the worker's cache of experiments' files."""
    return [path.read_bytes() for path in cache.glob("*/matrix/check.sh")]


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="a run's own user needs a worker running as root")
def test_an_agent_that_rewrites_its_grader_passes_nothing_now_or_in_a_later_experiment(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    matrix = _grader_matrix(tmp_path / "exp")
    cache = _own_cache(start_worker, tmp_path, concurrency=2)
    for _ in range(2):  # the second experiment reuses the worker's copy of the files
        exp_id = _submit(matrix, fleet_env)
        runs = store.results.all(exp_id)
        tiers = ("tamper", "wrong", "right")
        passed = {tier: [r.passed for r in runs if r.tier == tier] for tier in tiers}
        assert passed == {"tamper": [False, False], "wrong": [False, False], "right": [True, True]}
        assert {r.isolation for r in runs} == {"user"}
        # Its grader was never writable: the run is its own honest failure.
        assert all(r.status is RunStatus.completed for r in runs)
    original = (tmp_path / "exp" / "check.sh").read_bytes()
    assert _shipped_checks(cache) == [original]


@pytest.mark.integration
def test_an_unconfined_agent_that_rewrites_its_grader_is_tampered_and_the_files_restored(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    matrix = _grader_matrix(tmp_path / "exp", tamper_sandbox="none")
    # One run at a time: an unconfined agent shares the worker's copy with the runs
    # beside it, which is why a confined one is the default.
    cache = _own_cache(start_worker, tmp_path, concurrency=1)
    warned = run_cli("validate", str(matrix), env=fleet_env)
    assert "tier tamper: agents would run unconfined (`sandbox: none`)" in warned.stderr
    # The fix the key allows, not a root worker's, which `sandbox: none` overrides.
    assert "Remove it (`sandbox: auto` gives each run a user of its own on a root worker)" in (
        " ".join(warned.stderr.split())
    )
    # Preflight says so before anything is spent, and leaves the copy as shipped.
    checked = run_cli(
        "preflight", str(matrix), env={**fleet_env, "EVALFLEET_CACHE_DIR": str(cache)}
    )
    assert checked.returncode == 2, checked.stderr
    assert [line.split()[3] for line in checked.stdout.splitlines()[1:4]] == [
        "tampered", "completed", "completed"
    ]  # fmt: skip
    assert checked.stderr.splitlines()[0] == (
        "tier tamper: the agent changed check.sh, a file evaluation reads: its runs would be "
        "recorded tampered and pass nothing"
    )
    assert _shipped_checks(cache) == [(tmp_path / "exp" / "check.sh").read_bytes()]
    for _ in range(2):
        exp_id = _submit(matrix, fleet_env)
        runs = store.results.all(exp_id)
        tampered = [r for r in runs if r.tier == "tamper"]
        assert [(r.status, r.passed, r.fail_reason) for r in tampered] == [
            (RunStatus.tampered, False, "tampered: check.sh")
        ] * 2
        assert [r.passed for r in runs if r.tier == "wrong"] == [False, False]
        assert [r.passed for r in runs if r.tier == "right"] == [True, True]
        report = json.loads(run_cli("report", exp_id, "--format", "json", env=fleet_env).stdout)
        tier = report["tiers"]["tamper"]
        assert (tier["tampered"], tier["counted"], tier["passes"]) == (2, 2, 0)
        assert tier["isolation"].startswith("unconfined")
        shown = run_cli("report", exp_id, env=fleet_env).stdout
        assert "tamper: 2 runs changed the files evaluation reads" in shown
    assert _shipped_checks(cache) == [(tmp_path / "exp" / "check.sh").read_bytes()]


@pytest.mark.integration
def test_an_unconfined_agent_running_python_of_the_shipped_files_has_not_tampered_with_them(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """An honest agent that runs a Python package shipped with the matrix, unconfined:
    Python's bytecode cache beside the imported module was a change to the shipped
    files, so every such run was `tampered` (and the runs beside it lost their copy
    while it was rebuilt). The agents' Python writes no bytecode."""
    folder = tmp_path / "exp"
    (folder / "agentpkg").mkdir(parents=True)
    (folder / "agentpkg" / "helper.py").write_text("ANSWER = 42\n")
    (folder / "agentpkg" / "main.py").write_text(
        "import helper\nopen('answer.txt', 'w').write(f'{helper.ANSWER}\\n')\n"
    )
    matrix = folder / "matrix.yaml"
    matrix.write_text("""
name: pyagent
runs_per_tier: 3
agent: {kind: command, command: 'python3 "$EVALFLEET_MATRIX_DIR/agentpkg/main.py"',
        timeout_s: 30, sandbox: none}
tiers: [{id: T0}]
scenarios:
  - id: s
    prompt: answer
    evaluation: {gates: [{type: file_contains, path: answer.txt, substring: "42"}]}
""")
    cache = _own_cache(start_worker, tmp_path, concurrency=2)
    runs = store.results.all(_submit(matrix, fleet_env))
    assert [(r.status, r.passed) for r in runs] == [(RunStatus.completed, True)] * 3
    assert not list(cache.glob("*/matrix/agentpkg/__pycache__"))


# Looks for the secret everywhere it can read, leaves a child waiting for the tests to
# arrive, and answers with whatever it found.
HUNT = r"""
found=""
look() { grep -rIl --exclude-dir=proc -e "$SECRET_WORD" "$@" 2>/dev/null; }
for place in "$EVALFLEET_MATRIX_DIR" "$PWD/.." "$PWD/../.." /tmp "$HOME"; do
  hit=$(look "$place" | head -3); [ -n "$hit" ] && found="$found files:$hit"
done
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do
  tr '\0' '\n' < "$f" 2>/dev/null | grep -q -e "$SECRET_WORD" && found="$found proc:$f"
  # A path a process was given (the matrix file, a work folder) is searched too.
  for word in $(tr '\0' ' ' < "$f" 2>/dev/null); do
    case "$word" in /tmp/*|/root/*|/home/*|/run/*|/var/*) [ -e "$word" ] || continue
      hit=$(look "$word" | head -1); [ -n "$hit" ] && found="$found via:$hit" ;; esac
  done
done
env | grep -q EVALFLEET_TESTS && found="$found env:EVALFLEET_TESTS"
echo "found:[$found]"
( setsid bash -c 'for i in $(seq 60); do
    for t in "$0"/../tests "$0"/../../*/tests; do
      [ -e "$t" ] && cp -r "$t" "$0/leaked" 2>/dev/null
    done; sleep 0.1; done' "$PWD" & ) >/dev/null 2>&1
if [ -n "$found" ]; then echo "$found" > answer.txt; else echo unknown > answer.txt; fi
"""


# What the graders' Python runs, steered from what the agent leaves behind: a pytest.py
# in its workspace, which `python3 -m pytest` run there imported first; a
# usercustomize.py in its home's Python user site, which every python3 of its user ran
# first. Each prints a pass and ends the grader with exit 0.
SHADOW = "printf 'import sys\\nprint(\"all tests passed\")\\nsys.exit(0)\\n' > pytest.py"
USER_SITE = r"""
d=$(python3 -c 'import site; print(site.getusersitepackages())') && mkdir -p "$d" &&
printf 'import os, sys\nprint("all tests passed")\nsys.stdout.flush()\nos._exit(0)\n' \
  > "$d/usercustomize.py"
"""
FIB = "0 1 1 2 3 5 8 13 21 34".replace(" ", "\\n")
RIGHT = f"printf '{FIB}' > fib.txt; echo 42 > answer.txt"


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="a run's own user needs a worker running as root")
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_python_the_graders_start_is_not_the_agents_to_steer(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """Both passed a Terminal-Bench task's verifier (jailed) and a command gate in
    Python (as the run's user) without doing the task: the graders now get a home of
    their own, made after the agent ended, with Python's user site off, and a verifier
    a Python that does not put the workspace first on its path."""
    folder = tmp_path / "exp"
    shutil.copytree(FIXTURES / "tasks" / "tb-fibonacci", folder / "tasks" / "fib")
    check = 'python3 -c \'import sys; sys.exit(open("answer.txt").read().strip() != "42")\''
    (folder / "matrix.yaml").write_text(f"""
name: steer
runs_per_tier: 1
agent: {{kind: command, command: "true", timeout_s: 60}}
tiers:
  - {{id: shadow, agent: {{command: {json.dumps(SHADOW)}}}}}
  - {{id: user-site, agent: {{command: {json.dumps(USER_SITE)}}}}}
  - {{id: right, agent: {{command: {json.dumps(RIGHT)}}}}}
scenarios:
  - {{task: tasks/fib}}
  - id: plain
    prompt: answer
    evaluation: {{gates: [{{type: command_succeeds, command: {json.dumps(check)}}}]}}
""")
    for path in (folder, *folder.rglob("*")):
        path.chmod(path.stat().st_mode | 0o755 if path.is_dir() else path.stat().st_mode | 0o644)
    start_worker(concurrency=2)
    runs = store.results.all(_submit(folder / "matrix.yaml", fleet_env))
    passed = {(r.tier, r.scenario): r.passed for r in runs}
    assert passed == {
        ("shadow", "fib"): False,
        ("shadow", "plain"): False,
        ("user-site", "fib"): False,
        ("user-site", "plain"): False,
        ("right", "fib"): True,
        ("right", "plain"): True,
    }, {(r.tier, r.scenario): r.fail_reason for r in runs}


def _hidden_matrix(folder: Path, sandbox: str) -> Path:
    folder.mkdir()
    tests = folder / "tests"
    tests.mkdir()
    (tests / "expected.txt").write_text(f"{SECRET}\n")
    matrix = folder / "matrix.yaml"
    matrix.write_text(f"""
name: hidden
runs_per_tier: 1
agent: {{kind: command, command: {json.dumps(HUNT)}, timeout_s: 60, sandbox: {sandbox},
         env: {{SECRET_WORD: "{SEARCHED}"}}}}
tiers: [{{id: hunter}}]
scenarios:
  - id: s
    prompt: find the answer
    tests: tests
    reference: "echo {SECRET} > answer.txt"
    evaluation:
      gates:
        - {{type: command_succeeds, command: 'diff -q answer.txt "$EVALFLEET_TESTS/expected.txt"'}}
        - {{type: command_succeeds, command: 'test -f "$EVALFLEET_TESTS/expected.txt"'}}
        - {{type: command_succeeds, command: 'sleep 1; test ! -e leaked'}}
""")
    return matrix


@pytest.mark.integration
@pytest.mark.parametrize("sandbox", ["auto", "bwrap"])
def test_hidden_tests_and_the_reference_reach_the_gates_and_no_agent(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path, sandbox: str
) -> None:
    if sandbox == "auto" and os.geteuid() != 0:
        pytest.skip("a run's own user needs a worker running as root")
    if sandbox == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    matrix = _hidden_matrix(tmp_path / "exp", sandbox)
    # As the README says of an embedded run's tests: kept from this machine's other users
    # (a run's own user is one), or from the agent by a jail, which masks the folder.
    warned = run_cli("validate", str(matrix), env=fleet_env)
    assert ("may be read by other users of this machine" in warned.stderr) == (sandbox == "auto")
    (tmp_path / "exp").chmod(0o700)
    assert "other users" not in run_cli("validate", str(matrix), env=fleet_env).stderr
    start_worker(concurrency=1)
    exp_id = _submit(matrix, fleet_env)
    [run] = store.results.all(exp_id)
    evidence = store.evidence.get(exp_id, run.run_id)
    assert evidence is not None, run
    stdout = evidence.stdout.text
    # It searched and found nothing: not the tests, not the matrix's reference, not
    # where the gates get them.
    assert "found:[]" in stdout, (stdout, run)
    assert SECRET not in stdout and SECRET not in evidence.model_dump_json()
    # The gates had the tests, and nothing of the agent was left to copy them.
    assert [g.passed for g in run.gates] == [False, True, True], [g.message for g in run.gates]
    assert not run.passed and run.isolation == ("user" if sandbox == "auto" else "bwrap")


@pytest.fixture
def submitters_folder() -> Iterator[Path]:
    """A project folder as a user's are, 0755 and outside /tmp (a jail has a /tmp of its
    own, which would hide a folder there whatever masks it): in /var/tmp, removed after."""
    folder = Path(tempfile.mkdtemp(prefix="evalfleet-test-project-", dir="/var/tmp"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# The red team's agent of an embedded run: the submitter's folder from the embedded
# socket's path in /proc/net/unix (a jail's network namespace shows no socket there; the
# test then names the folder, as a guess at a usual place would), the matrix file in
# it, and the answer its reference writes, copied.
_MATRIX_READER = r"""
for folder in $(grep -o '/[^ ]*/\.evalfleet/private/redis\.sock' /proc/net/unix \
                | sed 's#/\.evalfleet/private/redis\.sock$##') "$SUBMITTER"; do
  grep -o "$SEARCHED" "$folder/matrix.yaml" 2>/dev/null | head -1 > answer.txt
  [ -s answer.txt ] && break
done
true
"""


@pytest.mark.integration
def test_an_embedded_runs_agent_reads_no_matrix_of_its_submitter_once_warned_of(
    fleet_env: dict[str, str], submitters_folder: Path
) -> None:
    """The submitter's matrix folder, of the usual modes, is readable by every user of
    the machine, a run's own user included: validate warns and names the fixes. Under
    `sandbox: bwrap` the jail masks the folder, so its agent reads no matrix; under the
    default an agent of a folder left open reads the reference's answer (what the
    warning is for), and none once the folder is closed as the warning says."""
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("a run's own user needs a root worker; the jail, bubblewrap")
    env = {k: v for k, v in fleet_env.items() if k != "EVALFLEET_BROKER_URL"}
    folder = submitters_folder
    reader = shlex.quote(_MATRIX_READER)
    command = f"SUBMITTER={folder} SEARCHED={shlex.quote(SEARCHED)} bash -c {reader}"
    matrix = folder / "matrix.yaml"
    matrix.write_text(f"""
name: reader
runs_per_tier: 1
agent: {{kind: command, command: {json.dumps(command)}, timeout_s: 60}}
tiers:
  - {{id: T0}}
  - {{id: jailed, agent: {{sandbox: bwrap}}}}
scenarios:
  - id: s
    prompt: answer
    reference: "echo {SECRET} > answer.txt"
    evaluation: {{gates: [{{type: file_contains, path: answer.txt, substring: {SECRET}}}]}}
""")
    matrix.chmod(0o644)

    warned = run_cli("validate", str(matrix), env=env)
    assert warned.returncode == 0, warned.stderr
    said = " ".join(warned.stderr.split())
    assert f"the matrix file {matrix} may be read by other users of this machine" in said
    assert f"`chmod o-rx {folder}` (or a folder above it), or set `sandbox: bwrap`" in said

    def passed() -> dict[str, bool]:
        done = run_cli("submit", str(matrix), "--json", "--workers", "2", env=env, cwd=folder)
        assert done.returncode == 0, done.stderr
        exp_id = json.loads(done.stdout)["experiment"]["id"]
        shown = run_cli("report", exp_id, "--format", "json", "--runs", env=env, cwd=folder)
        runs = json.loads(shown.stdout)["runs"]
        assert {run["status"] for run in runs} == {"completed"}, runs
        return {run["tier"]: run["passed"] for run in runs}

    assert passed() == {"T0": True, "jailed": False}
    folder.chmod(0o750)
    assert "other users" not in run_cli("validate", str(matrix), env=env).stderr
    assert passed() == {"T0": False, "jailed": False}


def test_the_matrix_file_tests_and_rubrics_are_hidden_in_the_shipped_files(tmp_path: Path) -> None:
    from core.files.bundle import collect, materialise
    from core.matrix import load_matrix

    folder = tmp_path / "exp"
    folder.mkdir()
    (folder / "tests").mkdir()
    (folder / "tests" / "test_it.py").write_text("assert True\n")
    (folder / "rubric.yaml").write_text("criteria: [{id: q, weight: 1, description: q}]\n")
    (folder / "tool.sh").write_text("echo tool\n")
    (folder / "matrix.yaml").write_text("""
name: h
agent: {kind: command, command: "true"}
tiers: [{id: T}]
scenarios:
  - {id: s, prompt: go, tests: tests, evaluation: {judge: {enabled: false, rubric: rubric.yaml}}}
""")
    matrix = load_matrix(folder / "matrix.yaml")
    bundle = collect(matrix, folder / "matrix.yaml")
    assert bundle.manifest.hidden == ["matrix/matrix.yaml", "matrix/rubric.yaml", "matrix/tests"]
    contents, cache = bundle.contents, tmp_path / "cache"
    built = materialise(bundle.manifest, lambda ds: {d: contents[d] for d in ds}, cache)
    modes = {p.relative_to(built).as_posix(): p.stat().st_mode & 0o777 for p in built.rglob("*")}
    assert modes["matrix/tool.sh"] == 0o444 and modes["matrix"] == 0o555
    assert modes["matrix/tests"] == 0o500 and modes["matrix/tests/test_it.py"] == 0o400
    assert modes["matrix/matrix.yaml"] == 0o400 and modes["matrix/rubric.yaml"] == 0o400
    digest = hashlib.sha256(b"echo tool\n").hexdigest()
    assert bundle.manifest.entries["matrix/tool.sh"].digest == digest


# Reads what an earlier run left, then leaves the same for the next: files in every
# folder any user may write, System V objects, a POSIX message queue (whether or not
# /dev/mqueue is mounted), a key in its user keyring, and a hook
# its gate runs (as a test runner runs a repository's conftest.py) that copies the
# hidden tests out. Answers with the tests an earlier run copied, if any.
RELAY_KEY = 0x5EA1
RELAY = rf"""
import ctypes, glob, os, platform
libc = ctypes.CDLL(None, use_errno=True)
add_key, keyctl = {{"x86_64": (248, 250)}}.get(platform.machine(), (217, 219))
def key(*args):
    return libc.syscall(*[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
TOPS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
found = sorted(path for top in TOPS for path in glob.glob(top + "/relay-*"))
copies = [open(p).read().strip() for p in glob.glob("/tmp/relay-tests-*/expected.txt")]
found += [kind for kind, there in (
    ("shm", libc.shmget({RELAY_KEY}, 0, 0) >= 0),
    ("msg", libc.msgget({RELAY_KEY}, 0) >= 0),
    ("sem", libc.semget({RELAY_KEY}, 0, 0) >= 0),
    ("key", key(keyctl, 10, -4, b"user", b"relay", 0) > 0),
    ("mq", libc.mq_open(b"/relay", os.O_RDONLY) >= 0),
) if there]
print(f"uid:{{os.getuid()}} found:{{found}}")
for top in TOPS:
    with open(f"{{top}}/relay-{{os.getpid()}}", "w") as mark:
        mark.write("hi")
    os.chmod(f"{{top}}/relay-{{os.getpid()}}", 0o644)
libc.shmget({RELAY_KEY}, 4096, 0o1666); libc.msgget({RELAY_KEY}, 0o1666)
libc.semget({RELAY_KEY}, 1, 0o1666); key(add_key, b"user", b"relay", b"hi", 2, -4)
os.umask(0); libc.mq_open(b"/relay", os.O_RDWR | os.O_CREAT, 0o666, None)
with open("hook.sh", "w") as hook:
    hook.write('d=/tmp/relay-tests-$$; cp -r "$EVALFLEET_TESTS" $d; chmod -R a+rX $d\n')
with open("answer.txt", "w") as answer:
    answer.write((copies[0] if copies else "unknown") + "\n")
"""


@pytest.fixture
def relay_swept() -> Iterator[None]:
    """Whatever a failing run of the relay test left, gone for the next test session."""
    yield
    subprocess.run(
        "rm -rf /tmp/relay-* /var/tmp/relay-* /dev/shm/relay-* /run/lock/relay-*",
        shell=True,
        check=False,
    )
    for kind in ("-M", "-Q", "-S"):
        subprocess.run(["ipcrm", kind, hex(RELAY_KEY)], capture_output=True, check=False)
    ctypes.CDLL(None).mq_unlink(b"/relay")


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="a run's own user needs a worker running as root")
def test_a_run_leaves_nothing_outside_its_folder_for_the_runs_after_it(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
    relay_swept: None,
) -> None:
    folder = tmp_path / "exp"
    (folder / "tests").mkdir(parents=True)
    (folder / "tests" / "expected.txt").write_text(f"{SECRET}\n")
    folder.chmod(0o700)
    matrix = folder / "matrix.yaml"
    matrix.write_text(f"""
name: relay
runs_per_tier: 3
agent: {{kind: command, command: {json.dumps(f"/usr/bin/python3 -c {shlex.quote(RELAY)}")},
         timeout_s: 60}}
tiers: [{{id: relay}}]
scenarios:
  - id: s
    prompt: find the answer
    tests: tests
    evaluation:
      gates:
        - {{type: command_succeeds,
            command: 'bash hook.sh; diff -q answer.txt "$EVALFLEET_TESTS/expected.txt"'}}
""")
    start_worker(concurrency=1)  # one run after another
    exp_id = _submit(matrix, fleet_env)
    runs = sorted(store.results.all(exp_id), key=lambda r: r.started_at or 0)
    assert [r.isolation for r in runs] == ["user"] * 3
    seen = []
    for run in runs:
        evidence = store.evidence.get(exp_id, run.run_id)
        assert evidence is not None, run
        seen.append(evidence.stdout.text.split("found:", 1)[1].strip())
    # Each run found nothing of the one before (on its slot's uid or another's) and
    # answered unknown: no run passed on what an earlier one copied out.
    assert seen == ["[]"] * 3, seen
    assert [r.passed for r in runs] == [False] * 3
    tops = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
    assert [p for top in tops for p in Path(top).glob("relay-*")] == []


# Looks through the worker's cache of experiments' files, wherever it is.
HUNT_CACHE = r"""
hit=$(grep -rIl -e "$SECRET_WORD" "$CACHE" 2>/dev/null | head -3)
echo "listed:[$(ls "$CACHE" 2>/dev/null | wc -l)] found:[$hit]"
echo "${hit:-unknown}" > answer.txt
"""


@pytest.fixture
def cache_outside_tmp() -> Iterator[Path]:
    """A cache folder outside the temporary folder, which jails make their own: where a
    worker's operator may put it (EVALFLEET_CACHE_DIR)."""
    top = Path("/var/tmp") / f"evalfleet-test-{uuid.uuid4().hex[:8]}"
    top.mkdir(mode=0o711)
    yield top / "files"
    shutil.rmtree(top, ignore_errors=True)


@pytest.mark.integration
@pytest.mark.parametrize("sandbox", ["auto", "bwrap"])
def test_an_earlier_experiments_hidden_tests_in_the_workers_cache_reach_no_agent(
    fleet_env: dict[str, str],
    start_worker: StartWorker,
    store: Store,
    tmp_path: Path,
    cache_outside_tmp: Path,
    sandbox: str,
) -> None:
    """The cache keeps each experiment's files, hidden tests too, for the next one: an
    agent of a later experiment that looks there finds the folders of none but its own."""
    if sandbox == "auto" and os.geteuid() != 0:
        pytest.skip("a run's own user needs a worker running as root")
    if sandbox == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    earlier = _hidden_matrix(tmp_path / "earlier", sandbox)
    start_worker({"EVALFLEET_CACHE_DIR": str(cache_outside_tmp)}, concurrency=1)
    _submit(earlier, fleet_env)
    assert list(cache_outside_tmp.glob("*/*/tests/expected.txt")), "the tests were cached"
    later = tmp_path / "later"
    later.mkdir()
    (later / "matrix.yaml").write_text(f"""
name: later
runs_per_tier: 1
agent: {{kind: command, command: {json.dumps(HUNT_CACHE)}, timeout_s: 60, sandbox: {sandbox},
         env: {{SECRET_WORD: "{SEARCHED}", CACHE: "{cache_outside_tmp}"}}}}
tiers: [{{id: hunter}}]
scenarios:
  - {{id: s, prompt: find the answer}}
""")
    [run] = store.results.all(_submit(later / "matrix.yaml", fleet_env))
    evidence = store.evidence.get(run.experiment_id, run.run_id)
    assert evidence is not None, run
    assert "found:[]" in evidence.stdout.text, (evidence.stdout.text, run)


# The gates' Python, each run in the workspace: a test module that imports the agent's
# own module (the tests' job), a `-c` check, and a script with a helper beside it.
UNITTEST = "import unittest\n\nimport answer\nfrom expected import EXPECTED\n\n\n" + (
    "class Answer(unittest.TestCase):\n"
    "    def test_answer(self):\n"
    "        self.assertEqual(answer.ANSWER, EXPECTED)\n"
)
CHECK = "import sys\n\nfrom expected import EXPECTED\n\n" + (
    'sys.exit(open("answer.txt").read().strip() != str(EXPECTED))\n'
)
# Leaves modules named as the ones the gates run and import, each ending with exit 0.
SHADOWS = r"""
echo 41 > answer.txt; echo 'ANSWER = 41' > answer.py
printf 'import sys\nsys.exit(0)\n' | tee unittest.py json.py expected.py > /dev/null
"""


@pytest.mark.integration
@pytest.mark.parametrize("sandbox", ["auto", "bwrap", "none"])
def test_a_module_the_agent_leaves_in_its_workspace_is_not_the_one_a_gate_runs(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path, sandbox: str
) -> None:
    """`python3 -m unittest` and `python3 -c "import json ..."` run in the workspace put it
    first on sys.path: the agent's unittest.py and json.py passed both gates. The gates'
    Python now finds the standard library's first, and the agent's own modules last,
    where the tests import them; a script's helper beside it is still its own."""
    if sandbox == "auto" and os.geteuid() != 0:
        pytest.skip("a run's own user needs a worker running as root")
    if sandbox == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    folder = tmp_path / "exp"
    (folder / "tests").mkdir(parents=True)
    (folder / "tests" / "test_answer.py").write_text(UNITTEST)
    (folder / "tests" / "expected.py").write_text("EXPECTED = 42\n")
    (folder / "tests" / "check.py").write_text(CHECK)
    unittest = 'python3 -m unittest discover -s "$EVALFLEET_TESTS" -t "$EVALFLEET_TESTS"'
    json_check = "import json, sys; sys.exit(open('answer.txt').read().strip() != '42')"
    (folder / "matrix.yaml").write_text(f"""
name: shadows
runs_per_tier: 1
agent: {{kind: command, command: "echo 41 > answer.txt; echo ANSWER = 41 > answer.py",
         timeout_s: 30, sandbox: {sandbox}}}
tiers:
  - {{id: wrong}}
  - {{id: right, agent: {{command: "echo 42 > answer.txt; echo ANSWER = 42 > answer.py"}}}}
  - {{id: shadows, agent: {{command: {json.dumps(SHADOWS)}}}}}
scenarios:
  - id: s
    prompt: answer
    tests: tests
    evaluation:
      gates:
        - {{type: command_succeeds, command: {json.dumps(unittest)}}}
        - {{type: command_succeeds, command: {json.dumps(f'python3 -c "{json_check}"')}}}
        - {{type: command_succeeds, command: 'python3 "$EVALFLEET_TESTS/check.py"'}}
""")
    for path in (folder, *folder.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    start_worker(concurrency=2)
    runs = store.results.all(_submit(folder / "matrix.yaml", fleet_env))
    gates = {r.tier: [g.passed for g in r.gates] for r in runs}
    messages = {r.tier: [g.message for g in r.gates] for r in runs}
    assert gates == {
        "wrong": [False, False, False],
        "right": [True, True, True],
        "shadows": [False, False, False],
    }, messages


# Run by the gate, as the run's user: every way to the graders' sitecustomize, which the
# pool process hands on to its next run, made to end every later Python with exit 0.
SITE_HOOK = r"""
site="${PYTHONPATH%%:*}"
pass='import os; os._exit(0)'
echo "$pass" > "$site/sitecustomize.py"
echo "$pass" > "$site/usercustomize.py"
chmod 777 "$site" "$site/sitecustomize.py"
mv "$site" "$site.gone" && mkdir "$site" && echo "$pass" > "$site/sitecustomize.py"
rm -rf "$site"
ls -ld "$site" "$site/sitecustomize.py" > /dev/null && echo "site: still there"
"""


@pytest.mark.integration
def test_a_gate_cannot_change_the_graders_python_the_next_run_of_its_process_gets(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """A pool process hands its graders' sitecustomize on from run to run (worker.
    workspace.put_away): a gate that runs the agent's code, as the run's user, writes,
    replaces, opens or deletes none of it, so no later run's Python gate passes by it."""
    folder = tmp_path / "exp"
    folder.mkdir()
    agent = f"cat > hook.sh <<'EOF'\n{SITE_HOOK}\nEOF\necho 41 > answer.txt"
    check = 'python3 -c \'import sys; sys.exit(open("answer.txt").read().strip() != "42")\''
    (folder / "matrix.yaml").write_text(f"""
name: site-relay
runs_per_tier: 3
agent: {{kind: command, command: {json.dumps(agent)}, timeout_s: 60}}
tiers: [{{id: T0}}]
scenarios:
  - id: s
    prompt: answer
    evaluation:
      gates: [{{type: command_succeeds, command: {json.dumps("bash hook.sh; " + check)}}}]
""")
    folder.chmod(0o755)
    (folder / "matrix.yaml").chmod(0o644)
    start_worker(concurrency=1)  # one pool process: each run after the one before
    runs = store.results.all(_submit(folder / "matrix.yaml", fleet_env))
    assert [r.passed for r in runs] == [False] * 3, [r.fail_reason for r in runs]
    assert all(r.status == RunStatus.completed for r in runs), [r.status for r in runs]
    for run in runs:
        evidence = store.evidence.get(run.experiment_id, run.run_id)
        assert evidence is not None
        said = "".join(g.output.text for g in evidence.gates)
        assert "Permission denied" in said and "site: still there" in said, said


@pytest.mark.integration
def test_a_graders_sitecustomize_an_unconfined_agent_made_first_is_not_the_one_run(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """Unconfined, the agent is the worker's user and may write in its run's folder: a
    graders' sitecustomize it makes there before the gates is replaced by the worker's,
    never taken for the one the process handed on."""
    folder = tmp_path / "exp"
    folder.mkdir()
    plant = (
        "mkdir -p ../graders-python && echo 'import os; os._exit(0)' > "
        "../graders-python/sitecustomize.py; echo 41 > answer.txt"
    )
    check = 'python3 -c \'import sys; sys.exit(open("answer.txt").read().strip() != "42")\''
    (folder / "matrix.yaml").write_text(f"""
name: site-plant
runs_per_tier: 2
agent: {{kind: command, command: {json.dumps(plant)}, timeout_s: 60, sandbox: none}}
tiers: [{{id: T0}}]
scenarios:
  - id: s
    prompt: answer
    evaluation: {{gates: [{{type: command_succeeds, command: {json.dumps(check)}}}]}}
""")
    folder.chmod(0o755)
    (folder / "matrix.yaml").chmod(0o644)
    start_worker(concurrency=1)
    runs = store.results.all(_submit(folder / "matrix.yaml", fleet_env))
    assert [r.isolation for r in runs] == ["none"] * 2
    assert [r.passed for r in runs] == [False] * 2, [r.fail_reason for r in runs]


# The agent's module, which a gate imports: it leaves a process of its own session
# (out of the gate's process group) that changes the workspace once the gate is over.
LINGERER = r"""
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        quiet = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(quiet, fd)
        time.sleep(1)
        with open("late.txt", "w") as out:
            out.write("written after the gate passed\n")
    os._exit(0)
"""


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="a run's own user needs a worker running as root")
def test_a_process_a_gate_left_cannot_change_the_workspace_under_the_next_gate(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """A gate that imports the agent's module runs its code; a process that code left in
    a session of its own outlived the gate and changed the workspace under the next
    gate, the judge and the evidence. Each gate's processes now end with it."""
    agent = f"cat > answer.py <<'PY'\n{LINGERER}\nPY"
    gates = (
        "[{type: command_succeeds, command: \"python3 -c 'import answer'\"},"
        " {type: command_succeeds, command: 'sleep 2; test ! -e late.txt'}]"
    )
    matrix = command_matrix(tmp_path, agent, runs=1, gates=gates)
    start_worker(concurrency=1)
    (run,) = store.results.all(_submit(matrix, fleet_env))
    assert run.isolation == "user"
    assert [(g.passed, g.message) for g in run.gates] == [(True, "exit code 0")] * 2
    evidence = store.evidence.get(run.experiment_id, run.run_id)
    assert evidence is not None and "late.txt" not in (evidence.changes_summary or "")


ARCHIVED = "workspace_archive: {keep: all}"


# The agent's module, run again by a rescore's gate: it notes whose rights it has and
# leaves a process behind (a root one would reach the store and every hidden file).
def _escalating(log: Path, mark: str) -> str:
    return rf"""
import os, subprocess
with open({str(log)!r}, "a") as out:
    out.write(f"{{os.geteuid()}}\n")
subprocess.Popen(["sleep", "300", {mark!r}], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
"""


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="a run's own user needs a worker running as root")
def test_a_rescore_runs_the_agents_code_as_a_run_user_and_leaves_nothing_running(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """A rescore's gates ran on the worker as root: a gate importing the agent's module
    ran its code with the worker's rights (a red team rewrote stored results so, and
    left root processes). They now run as a run user of their own, as the run's did."""
    log = shared_with_agents(tmp_path / "uids.log")
    mark = f"evalfleet-rescore-{uuid.uuid4().hex[:8]}"
    agent = f"cat > answer.py <<'PY'\n{_escalating(log, mark)}\nPY"
    gates = "[{type: command_succeeds, command: \"python3 -c 'import answer'\"}]"
    matrix = command_matrix(tmp_path, agent, runs=1, gates=gates, extra=ARCHIVED)
    start_worker(concurrency=1)
    exp_id = _submit(matrix, fleet_env)
    rescored = run_cli("rescore", exp_id, "--wait", "--format", "json", env=fleet_env)
    assert rescored.returncode == 0, rescored.stderr
    (run,) = store.reports.runs(exp_id, 2)
    assert [g.passed for g in run.gates] == [True]
    uids = [int(line) for line in log.read_text().split()]
    assert len(uids) == 2 and 0 not in uids  # the run's gate, then the rescore's
    assert not _processes_with(mark)


def _processes_with(word: str) -> list[int]:
    """The pids whose command line holds `word`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if word.encode() in argv:
                found.append(int(entry.name))
    return found


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="a run's own user needs a worker running as root")
def test_a_rescore_gates_with_the_hidden_tests_and_the_graders_python_the_run_had(
    fleet_env: dict[str, str], start_worker: StartWorker, store: Store, tmp_path: Path
) -> None:
    """A rescore's gates get what the run's gates had: the scenario's hidden tests at
    $EVALFLEET_TESTS and the graders' Python, before which a `json.py` the agent left in
    its workspace is not imported. Without them a right answer failed its rescore (no
    tests), and a shadowing module could have passed a wrong one."""
    folder = tmp_path / "exp"
    (folder / "tests").mkdir(parents=True)
    (folder / "tests" / "check.py").write_text(
        "import json, sys\nsys.exit(json.loads(open('answer.json').read()) != 42)\n"
    )
    shadow = "import sys; sys.exit(0)"
    agent = f"echo 41 > answer.json; echo {shlex.quote(shadow)} > json.py"
    (folder / "matrix.yaml").write_text(f"""
name: rescored-tests
runs_per_tier: 1
agent: {{kind: command, command: "echo 42 > answer.json", timeout_s: 30}}
tiers: [{{id: right}}, {{id: shadows, agent: {{command: {json.dumps(agent)}}}}}]
{ARCHIVED}
scenarios:
  - id: s
    prompt: answer
    tests: tests
    evaluation:
      gates: [{{type: command_succeeds, command: 'python3 "$EVALFLEET_TESTS/check.py"'}}]
""")
    for path in (folder, *folder.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    start_worker(concurrency=1)
    exp_id = _submit(folder / "matrix.yaml", fleet_env)
    rescored = run_cli("rescore", exp_id, "--wait", "--format", "json", env=fleet_env)
    assert rescored.returncode == 0, rescored.stderr
    for version in (1, 2):
        runs = store.results.all(exp_id) if version == 1 else store.reports.runs(exp_id, 2)
        assert {r.tier: r.passed for r in runs} == {"right": True, "shadows": False}, version
