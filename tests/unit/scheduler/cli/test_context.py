"""scheduler.cli.context and .options: the one place errors become exit codes, and the
shared options landing on the context."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from core.errors import (
    BrokerUnreachable,
    ConfigError,
    EvalfleetError,
    ExperimentNotFound,
    SettingError,
    WorkersDied,
)
from core.matrix.yaml_model import ConfigProblem
from scheduler.cli.context import CLIContext, Commands, pass_cli, size
from scheduler.cli.options import broker_option, format_option, workers_option


def group_raising(error: Exception) -> click.Group:
    @click.group(cls=Commands)
    def group() -> None:
        pass

    @group.command()
    def fails() -> None:
        raise error

    return group


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (ExperimentNotFound("exp-1"), 2),
        (SettingError("EVALFLEET_MAX_RUNS=x is not a whole number"), 2),
        (BrokerUnreachable("cannot reach the broker at redis://host:6379/0: refused"), 1),
        (WorkersDied("the local workers exited; see worker.log"), 1),
    ],
)
def test_an_error_is_one_line_and_its_exit_code(error: EvalfleetError, code: int) -> None:
    result = CliRunner().invoke(group_raising(error), ["fails"])
    assert result.exit_code == code
    assert result.stdout == ""
    assert result.stderr == f"error: {error}\n"


def test_a_config_error_lists_every_problem_then_what_to_do() -> None:
    error = ConfigError(
        [
            ConfigProblem(
                file="m.yaml", line=2, field="runz", message="unknown key", schema_error=True
            ),
            ConfigProblem(file="m.yaml", line=5, field="tiers", message="empty"),
        ]
    )
    result = CliRunner().invoke(group_raising(error), ["fails"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: m.yaml:2:1: runz: unknown key",
        "error: m.yaml:5:1: tiers: empty",
        "2 problem(s); nothing was started. `scheduler schema` prints every accepted key.",
    ]


@pytest.mark.parametrize(
    "problem",
    [
        ConfigProblem(file="m.yaml", message="file not found"),
        # A value its own check refused: the schema lists keys, not ids already taken.
        ConfigProblem(file="m.yaml", line=5, field="tiers.1.id", message="duplicate tier id"),
    ],
)
def test_a_problem_the_schema_does_not_answer_is_not_sent_to_it(problem: ConfigProblem) -> None:
    result = CliRunner().invoke(group_raising(ConfigError([problem])), ["fails"])
    assert result.stderr.splitlines() == [f"error: {problem}", "1 problem(s); nothing was started."]


def test_other_exceptions_are_bugs_with_their_traceback() -> None:
    result = CliRunner().invoke(group_raising(ZeroDivisionError("x")), ["fails"])
    assert isinstance(result.exception, ZeroDivisionError)


def test_shared_options_land_on_the_context_and_a_bad_broker_stops_first() -> None:
    seen: list[tuple[str | None, int | None, str]] = []

    @click.group(cls=Commands)
    def group() -> None:
        pass

    @group.command()
    @broker_option
    @workers_option
    @format_option()
    @pass_cli
    def command(cli: CLIContext) -> None:
        seen.append((cli.broker, cli.workers, cli.fmt))

    runner = CliRunner()
    args = ["command", "--broker", "redis://h:6379/0", "--workers", "3", "--format", "csv"]
    assert runner.invoke(group, args, env={"EVALFLEET_BROKER_URL": None}).exit_code == 0
    assert runner.invoke(group, ["command"], env={"EVALFLEET_BROKER_URL": None}).exit_code == 0
    assert seen == [("redis://h:6379/0", 3, "csv"), (None, None, "table")]

    bad = runner.invoke(group, ["command", "--broker", "http://h:6379"])
    assert bad.exit_code == 2 and bad.stderr.startswith("error: ") and len(seen) == 2


def test_the_broker_password_file_joins_the_url_wherever_it_is_on_the_line(tmp_path: Path) -> None:
    seen: list[str | None] = []

    @click.command()
    @broker_option
    @pass_cli
    def command(cli: CLIContext) -> None:
        seen.append(cli.broker)

    secret = tmp_path / "password"
    secret.write_text("filepw\n")
    clean = {"EVALFLEET_BROKER_URL": None, "EVALFLEET_BROKER_PASSWORD": None}
    runner = CliRunner()
    for args in (
        ["--broker", "redis://h:6379/0", "--broker-password-file", str(secret)],
        ["--broker-password-file", str(secret), "--broker", "redis://h:6379/0"],
    ):
        assert runner.invoke(command, args, env=clean).exit_code == 0
    env = {
        **clean,
        "EVALFLEET_BROKER_URL": "redis://h:6379/0",
        "EVALFLEET_BROKER_PASSWORD": "envpw",
    }
    assert runner.invoke(command, [], env=env).exit_code == 0
    assert seen == ["redis://:filepw@h:6379/0"] * 2 + ["redis://:envpw@h:6379/0"]


def test_size() -> None:
    assert [size(n) for n in (0, 1023, 1024, 5 * 1024**2, 3 * 1024**3)] == [
        "0 B",
        "1023 B",
        "1.0 KB",
        "5.0 MB",
        "3.0 GB",
    ]


def test_a_later_versions_own_failures_are_made_again_by_its_command_not_by_resume() -> None:
    """A rescore that could not redo a run leaves an infrastructure error of its version:
    `rescore` makes it again, where `resume --retry-errors` would start version 1 anew
    and leave the version behind. Runs whose agent part failed stay resume's."""
    from core.analysis.aggregate import ReportSettings, aggregate
    from core.matrix import Scoring
    from core.results.report import ExperimentInfo
    from core.results.run import REDONE_FAILED, RunResult, RunStatus
    from scheduler.cli.context import exit_if_infra_errors

    def run(index: int, status: RunStatus, reason: str | None = None) -> RunResult:
        return RunResult(
            experiment_id="e", run_id=f"e:T0:s:{index}", tier="T0", scenario="s",
            run_index=index, status=status, fail_reason=reason,
        )  # fmt: skip

    runs = [
        run(0, RunStatus.completed),
        run(1, RunStatus.infra_error, f"{REDONE_FAILED}SetupError('no run user free')"),
        run(2, RunStatus.infra_error, "agent could not start (exit 127)"),
    ]
    info = ExperimentInfo(id="e", name="n", created_at=0.0, total_runs=3, errors=2)
    report = aggregate(info, runs, ReportSettings(baseline="T0", scoring=Scoring()))
    report = report.model_copy(update={"version": 2, "version_note": "rescored: gates of x"})

    @click.command()
    def says() -> None:
        exit_if_infra_errors(report)

    said = CliRunner().invoke(says)
    assert said.exit_code == 3
    assert (
        "once the cause is mended, first for the 1 run whose agent could not be run, "
        "`scheduler resume e --retry-errors` runs it again (with the files as submitted: a "
        "fix in the matrix folder needs a new submit); then for the 1 run whose rescore "
        "failed, `scheduler rescore e` rescores it"
    ) in " ".join(said.output.split())
