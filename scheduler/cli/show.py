"""`scheduler show`: one run with its evidence, as it ran."""

from __future__ import annotations

import click

from scheduler.cli.context import CLIContext, echo_rendered, err, pass_cli
from scheduler.cli.options import broker_option


@click.command()
@click.argument("run", nargs=-1, required=True)
@broker_option
@click.option("--json", "as_json", is_flag=True, help="The run's result, evidence and deliveries.")
@pass_cli
def show(cli: CLIContext, run: tuple[str, ...], as_json: bool) -> None:
    """Show one run: outcome and reason, gates with their command and output, the
    judge's scores and reasons, a compact transcript, stdout and stderr tails, and
    every delivery.

    RUN is a run id (EXP:TIER:SCENARIO:INDEX, as `report --format json --runs`
    lists them), or EXP TIER SCENARIO INDEX, or the end of a run id that only one
    run of the 100 latest experiments has.

    \b
    Examples:
      scheduler show notes-guidance-20261122-101500-ab12:T1:create_notes:3
      scheduler show notes-guidance-20261122-101500-ab12 T1 create_notes 3
      scheduler show ab12:T1:create_notes:3 --json | jq .evidence.gates
    """
    from scheduler.report.render import terminal_width
    from scheduler.show import render_run

    fleet = cli.fleet()
    loaded = fleet.run(*run)
    exp_id = loaded.experiment_id
    versions = fleet.report_versions(exp_id)
    if len(versions) > 1 and fleet.current_version(exp_id) != 1:
        # `report` shows the latest version; what is shown here is the run as it ran.
        err.print(
            cli.hinted(
                f"note: this is the run as it ran (report version 1 of {versions[-1]}); its "
                f"result in a later version: `scheduler report {exp_id} --version "
                f"{versions[-1]} --format json --runs`"
            ),
            soft_wrap=True,
            markup=False,
        )
    if as_json:
        echo_rendered(loaded.record.model_dump_json(indent=2))
        if loaded.unreadable is not None:
            err.print(f"note: {loaded.unreadable}", markup=False)
        return
    click.echo(
        render_run(loaded.record, loaded.run_id, terminal_width(), loaded.unreadable), nl=False
    )
