"""The README's example through the CLI (2 scenarios, 3 tiers): no format of its report,
nor of `compare` of two of its runs, prints an interval outside the range its figure can
take, and each says in words that 2 scenarios are too few for any interval across
scenarios like these."""

from __future__ import annotations

import json

import pytest

from tests.conftest import EXAMPLES, StartWorker, run_cli
from tests.support.intervals import impossible_in_json, impossible_printed

pytestmark = pytest.mark.integration

TOO_FEW = "2 scenarios are too few to say anything about scenarios like these"


def _submitted(env: dict[str, str]) -> str:
    sent = run_cli("submit", str(EXAMPLES / "matrix.yaml"), "--wait", env=env)
    assert sent.returncode == 0, sent.stderr
    assert impossible_printed(sent.stdout) == []
    return sent.stdout.split("(", 1)[1].split(")", 1)[0]


def test_the_example_prints_no_impossible_interval_in_any_format(
    fleet_env: dict[str, str], start_worker: StartWorker
) -> None:
    start_worker(concurrency=2)
    env = {**fleet_env, "COLUMNS": "250"}
    a, b = _submitted(env), _submitted(env)
    shown = {
        " ".join(args): run_cli(*args, env=env)
        for args in (
            ("report", b, "--full"),
            ("report", b, "--format", "markdown"),
            ("report", b, "--format", "html"),
            ("report", b, "--format", "github"),
            ("report", b, "--format", "csv"),
            ("compare", a, b),
            ("compare", a, b, "--format", "markdown"),
            ("compare", a, b, "--format", "github"),
        )
    }
    for args, result in shown.items():
        assert result.returncode == 0, (args, result.stderr)
        assert impossible_printed(result.stdout) == [], args
        if "csv" not in args:
            assert TOO_FEW in result.stdout, args
    for command in (("report", b), ("compare", a, b)):
        document = json.loads(run_cli(*command, "--format", "json", env=env).stdout)
        assert impossible_in_json(document) == [], command
        assert TOO_FEW in json.dumps(document), command
