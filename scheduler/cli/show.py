"""`scheduler show`: one run with its evidence, its result as a report version scored it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from scheduler.cli.context import CLIContext, echo_rendered, err, pass_cli
from scheduler.cli.options import broker_option

if TYPE_CHECKING:
    from scheduler.experiments import LoadedRun


@click.command()
@click.argument("run", nargs=-1, required=True)
@broker_option
@click.option("--json", "as_json", is_flag=True, help="The run's result, evidence and deliveries.")
@click.option(
    "--version",
    "version",
    type=click.IntRange(min=1),
    default=None,
    help="The report version whose result to show: 1 is the run as it ran, 2, 3... each "
    "rejudge's or rescore's (default: the version `scheduler report` shows by default).",
)
@pass_cli
def show(cli: CLIContext, run: tuple[str, ...], as_json: bool, version: int | None) -> None:
    """Show one run: outcome and reason, gates with their command and output, the
    judge's scores and reasons, a compact transcript, stdout and stderr tails, and
    every delivery.

    RUN is a run id (EXP:TIER:SCENARIO:INDEX, as `report --format json --runs`
    lists them), or EXP TIER SCENARIO INDEX, or the end of a run id that only one
    run of the 100 latest experiments has. After a rejudge or rescore its result is
    the one the report shows (its latest version), and it says which.

    \b
    Examples:
      scheduler show notes-guidance-20261122-101500-ab12:T1:create_notes:3
      scheduler show notes-guidance-20261122-101500-ab12 T1 create_notes 3
      scheduler show ab12:T1:create_notes:3 --json | jq .evidence.gates
      scheduler show ab12:T1:create_notes:3 --version 1   # as it ran, before a rescore
    """
    from scheduler.report.render import terminal_width
    from scheduler.show import render_run

    fleet = cli.fleet()
    loaded = fleet.run(*run, version=version)
    scoring = cli.hinted(_scoring(loaded)) if len(loaded.versions) > 1 else None
    if as_json:
        if scoring is not None:
            err.print(f"note: {scoring}", soft_wrap=True, markup=False)
        echo_rendered(loaded.record.model_dump_json(indent=2))
        if loaded.unreadable is not None:
            err.print(f"note: {loaded.unreadable}", markup=False)
        return
    click.echo(
        render_run(
            loaded.record,
            loaded.run_id,
            terminal_width(),
            loaded.unreadable,
            scoring=scoring,
            first=loaded.first,
        ),
        nl=False,
    )


def _scoring(loaded: LoadedRun) -> str:
    """Which report version's result is shown, and how to see the others: a report's
    `scheduler show RUN` shows what the report counted, and says so."""
    shown, latest = loaded.record.version, loaded.versions[-1]
    run = loaded.run_id
    if shown == 1:
        return (
            f"report version 1 of {latest}: the run as it ran (`scheduler show {run} "
            f"--version {latest}`: as version {latest} scored it)"
        )
    made = f" ({loaded.version_note})" if loaded.version_note else ""
    return (
        f"report version {shown} of {latest}{made}: the run as that version scored it "
        f"(`scheduler show {run} --version 1`: as it ran)"
    )
