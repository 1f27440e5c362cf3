"""`scheduler rejudge` and `rescore`: a finished experiment's runs judged or gated
again through the fleet, as a new report version beside the original."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from core.errors import ConfigError, InputError
from core.wording import plural
from scheduler.cli.context import CLIContext, err, exit_if_infra_errors, pass_cli, print_problems
from scheduler.cli.options import (
    broker_option,
    format_option,
    nonfinite_option,
    wait_option,
    workers_option,
)

if TYPE_CHECKING:
    from scheduler.versions import NewVersion


@click.command()
@click.argument("experiment")
@broker_option
@click.option("--judge-model", metavar="MODEL", default=None, help="Another judge model.")
@click.option(
    "--rubric",
    "rubric_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Another rubric for every judged scenario (read here, sent with the tasks).",
)
@click.option(
    "--repeats",
    type=click.IntRange(1, 20),
    default=None,
    help="Judgments per run (default: the matrix's judge.repeats).",
)
@click.option(
    "--fresh",
    is_flag=True,
    help="Ask every judgment anew, none from the judgment cache, and keep the new answers "
    "in its place (a judge that answered wrongly has been mended).",
)
@workers_option
@wait_option("With a shared broker: follow until the report.")
@format_option()
@nonfinite_option
@pass_cli
def rejudge(
    cli: CLIContext,
    experiment: str,
    judge_model: str | None,
    rubric_file: str | None,
    repeats: int | None,
    fresh: bool,
) -> None:
    """Judge every run of a finished experiment again from its stored evidence,
    through the fleet, without starting any agent: a new report version (2, 3...)
    beside the original, which is never overwritten.

    \b
    Judgments already asked (same transcript, rubric, judge model and prompt
    version) come from the judgment cache at no cost (not with --fresh); the
    output says how many.

    \b
    Examples:
      scheduler rejudge EXP --judge-model gpt-4o            # a second opinion
      scheduler rejudge EXP --repeats 5                     # measure the judge's noise
      scheduler rejudge EXP --rubric rubrics/strict.yaml --broker redis://host:6379/0 --wait
      scheduler rejudge EXP --fresh                         # the judge's server mended
      scheduler report EXP --version 1                      # the original again
    """
    fleet = cli.fleet()
    try:
        version = fleet.rejudge(
            experiment, judge_model=judge_model, rubric=rubric_file, repeats=repeats, fresh=fresh
        )
    except ConfigError as exc:  # the rubric's: the matrix was checked when submitted
        print_problems(exc)
        raise InputError(
            f"--rubric {rubric_file} is not a usable rubric; nothing was started"
        ) from None
    _print_version(cli, version)


@click.command()
@click.argument("experiment")
@broker_option
@click.option(
    "--matrix",
    "matrix_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Take the gates of the experiment's scenarios from this matrix file (say, a fixed "
    "gate); default: the experiment's own gates.",
)
@workers_option
@wait_option("With a shared broker: follow until the report.")
@format_option()
@nonfinite_option
@pass_cli
def rescore(cli: CLIContext, experiment: str, matrix_file: str | None) -> None:
    """Run the gates again on the runs' archived workspaces (matrix `workspace_archive:`),
    and their judge with the new gates, through the fleet, without starting any agent:
    a new report version beside the original. Runs without an archived workspace
    (passed ones with `keep: failed`, ones above `max_bytes`) are kept as they were.

    \b
    Examples:
      scheduler rescore EXP --matrix matrix.yaml        # gates fixed since the runs
      scheduler rescore EXP --broker redis://host:6379/0 --wait
      scheduler report EXP --version 1                  # the original again
    """
    _print_version(cli, cli.fleet().rescore(experiment, gates_from=matrix_file))


def _print_version(cli: CLIContext, version: NewVersion) -> None:
    """The version's report once the fleet has made it, unless a shared broker without
    --wait: then its number."""
    from scheduler.report.render import render

    fleet = cli.fleet()
    if fleet.shared and not cli.wait:
        click.echo(f"{version.experiment_id} version {version.version}", err=cli.fmt == "json")
        return
    result = fleet.wait(version)
    if cli.reads_runs:  # its failure reasons are the version's runs'
        result = fleet.report(version.experiment_id, version=version.version, runs=True)
    rendered = render(result, cli.fmt, nonfinite=cli.nonfinite, full=cli.full, complete=cli.hinted)
    cli.print_report(rendered, result)
    if result.judge is not None:
        asked = fleet.asked(version)
        kept = f"; {plural(asked.kept, 'run')} kept as before" if asked.kept else ""
        # Asked is not answered: a judge still down answered none of them.
        failed = f", {asked.unanswered} not answered" if asked.unanswered else ""
        said = f"{plural(asked.judgments, 'judgment')}, {asked.cached} from cache{failed}{kept}"
        err.print(said, markup=False)
    exit_if_infra_errors(result)
