"""A task's verifier (core.evaluation.verifier) given a plain host shell as the run's
environment: every way it can end is a verdict with its reason, never an exception."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from core.evaluation.shell import ShellResult, run_shell
from core.evaluation.verifier import RunEnvironment, read_rewards, verify
from core.matrix.task import Verifier


def _environment(folder: Path) -> RunEnvironment:
    def run(command: str, timeout_s: float, env: Mapping[str, str]) -> ShellResult:
        return run_shell(command, folder, timeout_s=timeout_s, env={"PATH": "/usr/bin:/bin", **env})

    return RunEnvironment(run, folder)


@pytest.mark.parametrize(
    ("files", "rewards", "failure"),
    [
        ({"reward.txt": " 0.5\n"}, {"reward": 0.5}, None),
        ({"reward.txt": "abc\n"}, {}, "verifier: reward.txt holds 'abc', not a number"),
        ({"reward.txt": "nan"}, {}, "verifier: reward.txt holds 'nan', not a number"),
        (
            {"reward.json": '{"a": 1, "b": 0.25, "details": {"x": 1}, "seen": [2]}'},
            {"a": 1.0, "b": 0.25},
            None,
        ),
        ({"reward.json": '{"details": {"x": "y"}}'}, {}, "verifier: reward.json holds no "
         "number: '{\"details\": {\"x\": \"y\"}}'"),
        # A value in a reward's place that is not a number fails the verifier: the run
        # passed on the others.
        ({"reward.json": '{"a": NaN, "b": 1}'}, {}, "verifier: reward.json's 'a' holds nan, "
         "not a number"),
        ({"reward.json": '{"a": "0", "b": 1}'}, {}, "verifier: reward.json's 'a' holds '0', "
         "not a number"),
        ({"reward.json": '{"a": null, "b": 1}'}, {}, "verifier: reward.json's 'a' holds None, "
         "not a number"),
        ({"reward.json": '{"a": true, "b": 1}'}, {}, "verifier: reward.json's 'a' holds True, "
         "not a number"),
        ({"reward.json": "[1]"}, {}, "verifier: reward.json holds '[1]', not an object of numbers"),
        ({}, {}, "verifier: no /logs/verifier/reward.txt or reward.json"),
    ],
)  # fmt: skip
def test_rewards_are_read_or_the_reason_says_what_is_wrong(
    tmp_path: Path, files: dict[str, str], rewards: dict[str, float], failure: str | None
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert read_rewards(tmp_path) == (rewards, failure)


def test_a_verifier_that_times_out_fails_the_run_with_its_timeout(tmp_path: Path) -> None:
    verifier = Verifier(command="echo started; sleep 5", timeout_s=0.5)
    verdict = verify(verifier, _environment(tmp_path))
    assert (verdict.rewards, verdict.failure) == ({}, "verifier timed out after 0.5 s")
    assert verdict.evidence.command == "echo started; sleep 5"
    assert "started" in verdict.evidence.output.text


def test_exit_code_rewards_and_the_verifiers_own_env(tmp_path: Path) -> None:
    passing = Verifier(command='test "$MODE" = strict', env={"MODE": "strict"}, reward="exit_code")
    failing = Verifier(command="echo nope >&2; exit 3", reward="exit_code")
    assert verify(passing, _environment(tmp_path)).rewards == {"tests": 1.0}
    failed = verify(failing, _environment(tmp_path))
    assert (failed.rewards, failed.failure) == ({"tests": 0.0}, None)
    assert failed.unmet(1.0) == "reward tests 0 < 1 (pass_reward)"
    assert failed.evidence.exit_code == 3 and "--- stderr ---\nnope" in failed.evidence.output.text
