"""The commands the CLI suggests, followed as printed, reach the broker the user named:
after `--broker URL` every hint to a command that talks to a broker carries it, and a
password written in the URL is never printed (the hint asks for a password file).

Each command here runs in a folder of its own with no EVALFLEET_BROKER_URL: a hint
without `--broker` would go to an embedded Redis that is not there, and fail.
"""

from __future__ import annotations

import re
import secrets
import shlex
from pathlib import Path

import pytest

from core.store import Store
from tests.conftest import PREFIX, StartWorker, run_cli
from tests.support.experiments import Cell, command_matrix, seed_experiment
from tests.support.fleet import RedisServer, interrupted_while_following

pytestmark = pytest.mark.integration

# A hint's command: in backticks, or after "e.g. " on a line of its own.
_HINT = re.compile(r"`(scheduler [^`]*)`|^\s*e\.g\. (scheduler .*)$", re.MULTILINE)


def _hints(text: str) -> list[str]:
    """Every `scheduler ...` command the text suggests, whole (a wrapped line joined)."""
    joined = re.sub(r"(`scheduler [^`\n]*)\n\s*", r"\1 ", text)
    return [a or b for a, b in _HINT.findall(joined)]


def _without_broker(fleet_env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in fleet_env.items() if k != "EVALFLEET_BROKER_URL"}


def _follow(hint: str, env: dict[str, str], folder: Path) -> None:
    """Run a suggested command as printed (up to a redirection: its output is ours)."""
    words = shlex.split(hint.split(" > ")[0])
    assert words[0] == "scheduler", hint
    done = run_cli(*words[1:], env=env, cwd=folder)
    assert done.returncode == 0, (hint, done.stderr)


def test_the_hints_after_submit_with_a_broker_name_it_and_work_as_printed(
    fleet_env: dict[str, str], start_worker: StartWorker, redis_url: str, tmp_path: Path
) -> None:
    """`submit --broker URL --wait`: the report's `scheduler show` and `scheduler report`
    hints carry `--broker URL`, and each one, followed, works; so does the hint of a
    Ctrl-C while following. A broker from the environment is not named."""
    env, folder = _without_broker(fleet_env), tmp_path / "elsewhere"
    folder.mkdir()
    matrix = command_matrix(
        tmp_path, 'if [ "$EVALFLEET_RUN_INDEX" = 0 ]; then touch out.txt; fi', runs=3
    )
    start_worker(concurrency=2)
    done = run_cli("submit", str(matrix), "--broker", redis_url, "--wait", env=env, cwd=folder)
    assert done.returncode == 0, done.stderr
    hints = _hints(done.stdout)
    exp_id = done.stdout.splitlines()[0]
    assert any(h.startswith("scheduler show ") for h in hints), done.stdout
    assert f"scheduler report {exp_id} --full --broker {redis_url}" in hints, hints
    for hint in hints:  # the broker's words before a redirection of its output
        assert hint.split(" > ")[0].endswith(f" --broker {redis_url}"), hint
        _follow(hint, env, folder)
    # From EVALFLEET_BROKER_URL the broker needs no naming: the next command reads it too.
    again = _hints(run_cli("report", exp_id, env=fleet_env).stdout)
    assert f"scheduler report {exp_id} --full" in again
    assert not any("--broker" in h for h in again), again

    queue = f"{fleet_env['EVALFLEET_QUEUE']}-hints"  # no worker: the runs wait
    followed, stderr = interrupted_while_following(
        "submit", str(matrix), "--broker", redis_url, "--wait",
        env={**env, "EVALFLEET_QUEUE": queue}, cwd=folder,
    )  # fmt: skip
    assert stderr.strip().splitlines()[-1] == (
        "stopped following; the fleet goes on running it: "
        f"`scheduler report {followed} --wait --broker {redis_url}` follows it to its report, "
        f"`scheduler cancel {followed} --broker {redis_url}` stops it"
    )
    # A worker for its queue now: the report followed waits for its runs, then the cancel
    # finds it complete.
    start_worker(concurrency=2, queues=queue)
    for hint in _hints(stderr):
        _follow(hint, {**env, "EVALFLEET_QUEUE": queue}, folder)


def test_a_password_in_the_broker_url_is_never_in_a_hint(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    """`--broker redis://:PW@host`: the hints name the URL without its password and a
    password file to fill in; given `--broker-password-file`, they name that file.
    Either way the hint, followed, works; an error's hint says the same."""
    password = secrets.token_hex(8)
    server = RedisServer(tmp_path / "redis", password)
    try:
        cells = {
            (tier, "s1"): Cell(tuple(i < 2 for i in range(4)), reasons={3: "gates failed: x"})
            for tier in ("T0", "T1")
        }
        exp_id = seed_experiment(Store.from_url(server.url, prefix=PREFIX), tmp_path, cells)
        env, folder = _without_broker(fleet_env), tmp_path / "elsewhere"
        folder.mkdir()
        bare = f"redis://127.0.0.1:{server.port}/0"
        shown = run_cli("report", exp_id, "--broker", server.url, env=env, cwd=folder)
        assert shown.returncode == 0, shown.stderr
        assert password not in shown.stdout + shown.stderr
        hints = _hints(shown.stdout)
        assert f"scheduler report {exp_id} --full --broker {bare} --broker-password-file FILE" in (
            hints
        )
        words = f"--broker {bare} --broker-password-file FILE"
        assert all(h.split(" > ")[0].endswith(words) for h in hints), hints
        secret = tmp_path / "pw"
        secret.write_text(f"{password}\n")
        for hint in hints:
            _follow(hint.replace(" FILE", f" {secret}"), env, folder)

        given = run_cli(
            "report", exp_id, "--broker", bare, "--broker-password-file", str(secret),
            env=env, cwd=folder,
        )  # fmt: skip
        assert given.returncode == 0, given.stderr
        filed = _hints(given.stdout)
        assert filed and all(
            h.split(" > ")[0].endswith(f"--broker {bare} --broker-password-file {secret}")
            for h in filed
        ), filed
        wrong = run_cli("show", f"{exp_id}:T9:s1:0", "--broker", server.url, env=env, cwd=folder)
        assert wrong.returncode == 2 and password not in wrong.stderr
        assert (
            f"`scheduler report {exp_id} --format json --runs --broker {bare} "
            "--broker-password-file FILE` lists them"
        ) in " ".join(wrong.stderr.split())
    finally:
        server.stop()
