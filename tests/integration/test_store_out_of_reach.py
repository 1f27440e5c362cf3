"""The store out of reach of the agent under test (docs/RELIABILITY.md, "Threat model").

An agent hunts for the broker as an adversary would (tests/support/store_hunter.py):
every listening TCP port on loopback and every Unix socket of the machine, spoken to
as Redis without a password and with every password-looking word of every
/proc/*/environ and /proc/*/cmdline it can read, then every key of every database it
gets into. Its gate fails. Meanwhile the test reads the arguments and environment of
every process on the machine (the CLI during `submit --wait`, the workers, their
pool processes, Flower) for the password.

The workers run as root here, so the hunter runs as a user of its run's own
(worker.confinement, `sandbox: auto`): the embedded socket's 0700 folder keeps it from
connecting at all, and no other process's environment or working folder is its to
read. The test itself reads every process as root: the password is in none of their
arguments or environments, which is what keeps out an agent that runs as the worker's
own user (`sandbox: none`, or a worker that is not root).
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.conftest import PREFIX, QUEUE, SUPPORT, run_cli, shared_with_agents, start_cli
from tests.support.experiments import command_matrix
from tests.support.fleet import RedisServer, Service, cli_worker, free_port, services, wait_until

pytestmark = pytest.mark.integration

HUNTER = SUPPORT / "store_hunter.py"


def _hunting_matrix(folder: Path, hunt: Path, release: Path) -> Path:
    """One run whose agent hunts, then waits for the test to have read /proc; its gate
    fails (it makes no out.txt). `hunt`'s folder must be shared with the agent's user."""
    command = (
        f"python3 {HUNTER} {hunt}.tmp && mv {hunt}.tmp {hunt}; "
        f"while [ ! -e {release} ]; do sleep 0.1; done"
    )
    return command_matrix(folder, command, runs=1)


def _wait_for(hunt: Path, cli: subprocess.Popen[str]) -> None:
    def done() -> bool:
        if cli.poll() is not None:
            raise AssertionError(f"the CLI exited ({cli.returncode}): {cli.communicate()}")
        return hunt.exists()

    wait_until(done, "the hunter's findings", timeout=120)


def _harness_endpoint(url: str) -> str:
    """The test harness's own Redis (the machine's, database 13, no password): not
    evalfleet's, and shared by every test session, so left out of what is judged."""
    parts = urlsplit(url)
    return f"tcp:{parts.port}" if parts.port else f"unix:{parts.path}"


def _keys_reached(hunt: dict[str, Any], harness: str) -> dict[str, list[str]]:
    """The keys of this session (PREFIX, under which evalfleet stores them here) the
    hunter listed, by endpoint."""
    return {
        endpoint: [key for key in found["keys"] if PREFIX in key]
        for endpoint, found in hunt["reached"].items()
        if endpoint != harness and any(PREFIX in key for key in found["keys"])
    }


def _processes_showing(secret: str) -> list[str]:
    """Every /proc/PID/cmdline and /proc/PID/environ on the machine that holds `secret`."""
    found = []
    for proc in Path("/proc").iterdir():
        for name in ("cmdline", "environ"):
            try:
                if proc.name.isdigit() and secret.encode() in (proc / name).read_bytes():
                    found.append(f"{proc.name}/{name}: {(proc / 'cmdline').read_bytes()[:120]!r}")
            except OSError:  # gone meanwhile
                continue
    return found


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _outcome(exp_id: str, env: dict[str, str], cwd: Path) -> tuple[str, bool]:
    shown = run_cli("report", exp_id, "--format", "json", "--runs", env=env, cwd=cwd)
    assert shown.returncode == 0, shown.stderr
    (run,) = json.loads(shown.stdout)["runs"]
    return run["status"], run["passed"]


def test_an_agent_hunting_for_the_embedded_store_reaches_no_key_and_no_password(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    env = {k: v for k, v in fleet_env.items() if k != "EVALFLEET_BROKER_URL"}
    hunt = shared_with_agents(tmp_path / "found", folder=True) / "hunt.json"
    release = tmp_path / "release"
    matrix = _hunting_matrix(tmp_path / "m", hunt, release)
    home = tmp_path / "home"
    home.mkdir()
    cli = start_cli("submit", str(matrix), "--json", "--workers", "1", env=env, cwd=home)
    try:
        _wait_for(hunt, cli)
        state = json.loads((home / ".evalfleet" / "redis.json").read_text())
        private = home / ".evalfleet" / "private"
        socket = Path(state.get("socket", "/(none: on TCP)"))
        files = (private, private / "password", private / "redis.conf", socket.parent)
        modes = [_mode(path) if path.exists() else None for path in files]
        password = files[1].read_text().strip() if files[1].exists() else ""
        shown = _processes_showing(password) if password else []
    finally:
        release.touch()
        out, err = cli.communicate(timeout=120)
    assert cli.returncode == 0, err
    found = json.loads(hunt.read_text())

    # Of every Redis it could speak to, none gave it a key of the experiment ...
    assert _keys_reached(found, _harness_endpoint(fleet_env["EVALFLEET_BROKER_URL"])) == {}
    # ... though it found the embedded one's socket. Confined (a user other than the
    # CLI's), the socket's 0700 folder keeps it from connecting at all; as the CLI's own
    # user (root passes the folder's mode) it was refused: no word of any process's
    # arguments or environment is its password.
    confined = found["euid"] != os.geteuid()
    auth = "denied" if confined else "refused"
    assert found["reached"][f"unix:{socket}"] == {"auth": auth, "keys": []}
    assert shown == []
    assert modes == [0o700, 0o600, 0o600, 0o700]  # the socket's folder: private or its own
    # It earned a failed gate, and that is what was recorded.
    exp_id = json.loads(out)["experiment"]["id"]
    assert _outcome(exp_id, env, home) == ("completed", False)
    # The password file itself is the CLI's user's only (and root's). An agent running as
    # that user (unconfined) reads it under /proc/<the CLI's or a worker's
    # pid>/cwd/.evalfleet/private/password, and with it would get in; a user of the
    # run's own reads no other user's working folder.
    if confined:
        assert found["private_files"] == []


def test_an_agent_on_a_fleet_finds_the_password_in_no_process_and_reaches_no_key(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    password = f"fleetpw-{uuid.uuid4().hex}"
    server = RedisServer(tmp_path / "redis", password=password)
    bare = f"redis://127.0.0.1:{server.port}/0"
    password_file = tmp_path / "broker-password"
    password_file.write_text(password + "\n")
    password_file.chmod(0o600)
    env = {k: v for k, v in fleet_env.items() if k != "EVALFLEET_BROKER_URL"}
    hunt = shared_with_agents(tmp_path / "found", folder=True) / "hunt.json"
    release = tmp_path / "release"
    matrix = _hunting_matrix(tmp_path / "m", hunt, release)
    try:
        with services() as started:
            # A worker as docs/FLEET.md starts one: the password from a file.
            started.append(
                cli_worker(env, tmp_path / "worker.log", "--broker", bare,
                           "--broker-password-file", str(password_file),
                           "--concurrency", "1", "--queues", QUEUE)
            )  # fmt: skip
            # Flower as compose starts it: the URL, password included, in its environment.
            flower = Service(
                ["celery", "-A", "worker.app", "flower", f"--port={free_port()}",
                 "--address=127.0.0.1"],
                {**env, "EVALFLEET_BROKER_URL": server.url},
                tmp_path / "flower.log",
            )  # fmt: skip
            started.append(flower)
            flower.wait_for("Visit me at")
            # The CLI with the password in its arguments, the worst case.
            cli = start_cli("submit", str(matrix), "--wait", "--json", "--broker", server.url,
                            env=env)  # fmt: skip
            try:
                _wait_for(hunt, cli)
                shown = _processes_showing(password)
                cli_line = Path(f"/proc/{cli.pid}/cmdline").read_bytes()
            finally:
                release.touch()
                out, err = cli.communicate(timeout=120)
            assert cli.returncode == 0, err
            exp_id = json.loads(out)["experiment"]["id"]
            outcome = _outcome(exp_id, {**env, "EVALFLEET_BROKER_URL": server.url}, tmp_path)
            run_cli("delete", exp_id, "--yes", env={**env, "EVALFLEET_BROKER_URL": server.url})
    finally:
        server.stop()
    found = json.loads(hunt.read_text())

    assert shown == []  # not the CLI, the worker, its pool, Flower nor any other process
    assert f"redis://:{'*' * len(password)}@127.0.0.1".encode() in cli_line  # masked in place
    assert _keys_reached(found, _harness_endpoint(fleet_env["EVALFLEET_BROKER_URL"])) == {}
    assert found["reached"][f"tcp:{server.port}"] == {"auth": "refused", "keys": []}
    assert outcome == ("completed", False)


# The red team's agent: the submitter's folder from the embedded socket's path in
# /proc/net/unix (or the test's word for it, should the socket be elsewhere), then the
# worker log, whose line for each finished run says whether it passed; it copies what a
# passing run did (here: the log itself) and so passes its own gate.
_LOG_READER = r"""
id -u > "$SEEN/uid"
for folder in $(grep -o '/[^ ]*/\.evalfleet/private/redis\.sock' /proc/net/unix \
                | sed 's#/\.evalfleet/private/redis\.sock$##') "$SUBMITTER"; do
  for file in worker.log redis.log redis.json; do
    if cat "$folder/.evalfleet/$file" > /dev/null 2>&1; then
      echo "$folder/.evalfleet/$file" >> "$SEEN/read"
    fi
  done
  if grep -h "'passed': True" "$folder/.evalfleet/worker.log" > answers 2>/dev/null; then
    cp answers out.txt
  fi
done
true
"""


def test_an_agent_reads_no_log_of_its_own_embedded_submit_even_one_an_older_version_left(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    """An agent of a user of its run's own (workers as root, `sandbox: auto`) goes for
    the embedded mode's worker log in the submitter's folder: its lines of earlier runs
    say which passed. The folder and its files are the submitter's only, those an older
    version left readable to all included (tightened as the command starts)."""
    env = {k: v for k, v in fleet_env.items() if k != "EVALFLEET_BROKER_URL"}
    seen = shared_with_agents(tmp_path / "seen", folder=True)
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    old = home / ".evalfleet"
    old.mkdir(mode=0o755)
    old.chmod(0o755)
    for name, text in (
        ("worker.log", "succeeded: {'run_id': 't-1:T0:s:0', 'status': 'completed', "
                       "'passed': True}\n"),
        ("redis.log", "an older Redis's log\n"),
    ):  # fmt: skip
        (old / name).write_text(text)
        (old / name).chmod(0o644)
    command = f"SEEN={seen} SUBMITTER={home} bash -c {shlex.quote(_LOG_READER)}"
    matrix = command_matrix(tmp_path / "m", command, runs=2)
    result = run_cli("submit", str(matrix), "--json", "--workers", "1", env=env, cwd=home)
    assert result.returncode == 0, result.stderr

    exp_id = json.loads(result.stdout)["experiment"]["id"]
    shown = run_cli("report", exp_id, "--format", "json", "--runs", env=env, cwd=home)
    runs = json.loads(shown.stdout)["runs"]
    assert [(run["status"], run["passed"]) for run in runs] == [("completed", False)] * 2
    assert int((seen / "uid").read_text()) != os.geteuid()  # confined: a user of its own
    assert not (seen / "read").exists(), (seen / "read").read_text()
    assert "'passed': True" in (old / "worker.log").read_text()  # there was a pass to copy
    others = {
        str(path.relative_to(home)): oct(_mode(path))
        for path in (old, *old.rglob("*"))
        if (path.is_file() or path.is_dir()) and _mode(path) & 0o077
    }
    assert others == {}
