"""What `scheduler preflight` says of the fixture tasks (tests/fixtures/tasks) that are
not sound: their broken and their vacuous task, the same under every sandbox."""

from __future__ import annotations

BROKEN, VACUOUS = "broken-oracle", "vacuous-tests"

UNSOUND = [
    f"scenario {BROKEN}: the oracle (the task's solution) fails: reward 0 < 1 (pass_reward)",
    f"scenario {VACUOUS}: its verifier passes the untouched environment: its tests check nothing",
]


def problems(stderr: str) -> list[str]:
    """The scenarios preflight names as problems, a line each."""
    return [line for line in stderr.splitlines() if line.startswith("scenario ")]
